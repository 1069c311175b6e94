"""One number format everywhere: js/common/format.js (run by node), its Python mirror and its Vega
expression (rendered by vl-convert) write every number of a table the same way."""

import json
import math
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

import pytest

from activis.widgets.format import NUMBER_EXPR, format_integer, format_number, format_percent

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = [12345.6, -12345.6, 0.000123, -0.000123, -1e9, 1e9, 1e6, 999999.4, 999999.6, 1e-3, 0.00099996, 0, -0.0,
           1, -1, 7, 42, 100, 1000, 1234.5, -1234.5, 2.5, 0.5, 0.1 + 0.2, 1 / 3, 2 / 3, 123.456, 99.995, 999.96,
           0.01234, 3.14159, 271828.18, 6.02e23, 1.6e-19, 5e-324, 1.7976931348623157e308, math.nan, math.inf, -math.inf]
COUNTS = [0, 1, 999, 1000, 12345, 1234567, -2500, 2.5, -2.5, 1e9]
PERCENTS = [0, 1, 0.5, 0.1234, 0.12345, 0.99999, 1 / 3, 0.001, 2.5, 0.00049]
EXPECTED = {12345.6: "12346", 0.000123: "1.23e-4", -1e9: "-1e+9", math.nan: "–", 1234.5: "1235", 1 / 3: "0.3333",
            100: "100", 999999.6: "1000000", 0.00099996: "1e-3", 6.02e23: "6.02e+23"}

node = shutil.which("node")


def _js(name: str, values: list[float]) -> list[str]:
    """Run ``name`` of js/common/format.js on ``values`` in node (non-finite values travel as text)."""
    source = (ROOT / "js" / "common" / "format.js").read_text()
    script = source + f"""
const values = JSON.parse(process.argv[1]).map((v) => (typeof v === "string" ? Number(v) : v));
process.stdout.write(JSON.stringify(values.map((v) => {name}(v))));
"""
    wire = [v if math.isfinite(v) else str(v).replace("inf", "Infinity").replace("nan", "NaN") for v in values]
    out = subprocess.run([node, "--input-type=module", "-e", script, json.dumps(wire)], capture_output=True,
                         text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_python_writes_the_documented_examples():
    for value, text in EXPECTED.items():
        assert format_number(value) == text, value
    assert format_integer(12345.6) == "12,346" and format_percent(0.1234) == "12.3%"


@pytest.mark.skipif(node is None, reason="needs node")
def test_js_and_python_write_every_number_the_same():
    assert _js("formatNumber", NUMBERS) == [format_number(v) for v in NUMBERS]
    assert _js("formatInteger", COUNTS) == [format_integer(v) for v in COUNTS]
    assert _js("formatPercent", PERCENTS) == [format_percent(v) for v in PERCENTS]
    # the signs and rounding that differ between languages are the JS ones
    assert _js("formatNumber", [-0.0, 2.5e-7, 1234.5]) == ["0", "2.5e-7", "1235"]


def test_vega_expression_writes_them_as_the_views_do():
    """Altair charts label axes with NUMBER_EXPR: rendered offline by vl-convert, each label is format_number's."""
    vl_convert = pytest.importorskip("vl_convert")
    finite = [v for v in NUMBERS if math.isfinite(v)] + [math.nan]
    spec = {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": [{"row": i, "value": None if math.isnan(v) else v} for i, v in enumerate(finite)]},
        "transform": [{"calculate": NUMBER_EXPR, "as": "text"}],
        "mark": {"type": "text"},
        "encoding": {"y": {"field": "row", "type": "ordinal"}, "text": {"field": "text", "type": "nominal"}},
    }
    svg = vl_convert.vegalite_to_svg(json.dumps(spec))
    texts = [unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]
    rows = texts[-len(finite):]  # the axis' row numbers come first, then the marks in data order
    assert rows == [format_number(v) for v in finite]
