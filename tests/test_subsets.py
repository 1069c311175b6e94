"""Subset definitions: expressions, helpers, combinations, errors, persistence and live evaluation."""

import json

import numpy as np
import pandas as pd
import pytest

from activis.store import LayerSpec, StoreWriter, open_store, write_store
from activis.subsets import Subset, SubsetError, Subsets

CLASSES = ["cat", "dog", "bird"]


def make_store(path, n=300, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    outputs = rng.standard_normal((n, 3)).astype(np.float32)
    outputs[np.arange(n), labels] += 1.5 * (rng.random(n) < 0.7)
    meta = pd.DataFrame({
        "age": rng.integers(0, 90, n),
        "topic": rng.choice(["sports", "news", "arts"], n),
        "my col": rng.random(n),
        "text": np.where(rng.random(n) < 0.1, None, rng.choice(["a gun here", "peace", "Gun control"], n)),
    })
    acts = rng.standard_normal((n, 8)).astype(np.float32)
    return write_store(path, {"fc": acts}, labels=labels, outputs=outputs, class_names=CLASSES, metadata=meta,
                       layer_specs={"fc": LayerSpec(8, "float32")})


@pytest.fixture
def store(tmp_path):
    return make_store(tmp_path / "store")


@pytest.fixture
def subsets(store):
    return Subsets(store)


def test_class_prediction_and_error_helpers(store, subsets):
    df = store.instances
    assert subsets.by_class() == ["true cat", "true dog", "true bird"]
    for k, name in enumerate(CLASSES):
        np.testing.assert_array_equal(subsets.mask(f"true {name}"), df.label.to_numpy() == k)
    assert subsets.by_prediction(classes=["dog", 2]) == ["pred dog", "pred bird"]
    np.testing.assert_array_equal(subsets.mask("pred bird"), df.pred.to_numpy() == 2)
    nine_as_four = subsets.confusion("cat", "dog")
    assert nine_as_four.name == "true cat, pred dog"
    np.testing.assert_array_equal(subsets.mask(nine_as_four), (df.label == 0).to_numpy() & (df.pred == 1).to_numpy())
    wrong, right = subsets.misclassified(), subsets.correct()
    assert subsets.size(wrong) + subsets.size(right) == store.n_instances
    assert not (subsets.mask(wrong) & subsets.mask(right)).any()
    low = subsets.by_score("unsure", high=0.5)
    np.testing.assert_array_equal(subsets.mask(low), df.confidence.to_numpy() < 0.5)
    sure_cat = subsets.by_score("sure cat", low=0.8, cls="cat")
    np.testing.assert_array_equal(subsets.mask(sure_cat), store.scores[:, 0] >= 0.8)
    with pytest.raises(SubsetError, match="Unknown class 'cow'; classes: 'cat', 'dog', 'bird'"):
        subsets.confusion("cow", "dog")
    with pytest.raises(SubsetError, match="out of range"):
        subsets.by_class(classes=[3])


@pytest.mark.parametrize("expression, expected", [
    ("age > 20 and topic == 'sports'", lambda d: (d.age > 20) & (d.topic == "sports")),
    ("age > 60 or not correct", lambda d: (d.age > 60) | ~d.correct),
    ("20 <= age < 40", lambda d: (d.age >= 20) & (d.age < 40)),
    ("(age > 20) & ~(topic == 'news') | (label == 2)", lambda d: ((d.age > 20) & (d.topic != "news")) | (d.label == 2)),
    ("label in [0, 2] and pred not in [1]", lambda d: d.label.isin([0, 2]) & ~d.pred.isin([1])),
    ("topic.isin(['arts', 'news'])", lambda d: d.topic.isin(["arts", "news"])),
    ("age.between(10, 19)", lambda d: d.age.between(10, 19)),
    ("`my col` < 0.25", lambda d: d["my col"] < 0.25),
    ("text.str.contains('gun', case=False)", lambda d: d.text.str.contains("gun", case=False).fillna(False)),
    ("text.isna()", lambda d: d.text.isna()),
    ("age * 2 - 10 > 100 and index < 150", lambda d: (d.age * 2 - 10 > 100) & (d.index < 150)),
    ("abs(age - 45) < 5", lambda d: (d.age - 45).abs() < 5),
    ("label_name == 'bird' and pred_name != 'bird'", lambda d: (d.label == 2) & (d.pred != 2)),
    ("True", lambda d: pd.Series(True, index=d.index)),
])
def test_query_expressions_match_pandas(store, subsets, expression, expected):
    df = store.instances.copy()
    df["index"] = np.arange(len(df))
    subset = subsets.add("q", expression)
    np.testing.assert_array_equal(subsets.mask(subset), expected(df).to_numpy(dtype=bool))
    assert subset.describe() == expression


def test_score_and_output_functions(store, subsets):
    np.testing.assert_array_equal(subsets.mask(subsets.add("s", "score('dog') > 0.5")), store.scores[:, 1] > 0.5)
    np.testing.assert_array_equal(subsets.mask(subsets.add("o", "output(2) - output(0) > 1")),
                                  store.outputs[:, 2] - store.outputs[:, 0] > 1)


@pytest.mark.parametrize("expression, message", [
    ("agee > 20", r"Unknown column 'agee'.*Did you mean 'age'\?.*Columns: index, label, pred.*age, topic, my col"),
    ("age >", r"Cannot parse subset expression 'age >'"),
    ("", r"non-empty string"),
    ("age", r"'age' in 'age' is not a condition"),
    ("age > 3 and topic", r"'topic' in 'age > 3 and topic' is not a condition"),
    ("topic > 3", r"Cannot compare numbers with text in subset expression 'topic > 3'"),
    ("label in 3", r"'in' needs a list"),
    ("__import__('os').system('echo pwned')", r"not available|not allowed"),
    ("age.__class__", r"Attribute is not allowed"),
    ("age[0] > 1", r"Subscript is not allowed"),
    ("(lambda: 1)()", r"not allowed|Only named functions"),
    ("age.apply(print)", r"Method .apply\(\) is not available"),
    ("open('x') == 1", r"Function 'open' is not available"),
    ("score('cow') > 0.1", r"Unknown class 'cow'"),
    ("score(7) > 0.1", r"Class 7 is out of range"),
    ("score() > 0.1", r"takes one class"),
    ("age > 9 ** 9 ** 9", r"Exponents above 64"),
    ("topic == 'a' * 1000000000", r"Repeating text"),
    ("text.str.repeat(3) == 'a'", r"Method .repeat\(\) is not available.*\.str\.\{contains, endswith"),
    ("text.str.pad(5) == 'a'", r"Method .pad\(\) is not available"),
    ("text.str.center(5) == 'a'", r"Method .center\(\) is not available"),
    ("text.str.get(0) == 'a'", r"Method .get\(\) is not available"),
    ("text.str.__class__('x')", r"Method .__class__\(\) is not available"),
    ("age.str.abs() > 1", r"Attribute is not allowed"),
])
def test_bad_expressions_are_clear_errors_and_save_nothing(store, subsets, expression, message):
    subsets.add("kept", "age > 1")
    saved = subsets.path.read_text()
    with pytest.raises(SubsetError, match=message):
        subsets.add("bad", expression)
    assert "bad" not in subsets
    assert subsets.path.read_text() == saved


# the allowed .str. methods, spelled here independently of the code: any other method pandas offers is refused
ALLOWED_STR_METHODS = {"contains", "startswith", "endswith", "match", "fullmatch", "len", "lower", "upper", "strip"}
OTHER_STR_METHODS = sorted(name for name in dir(pd.Series.str) if not name.startswith("_")
                           and callable(getattr(pd.Series.str, name)) and name not in ALLOWED_STR_METHODS)


@pytest.mark.parametrize("method", OTHER_STR_METHODS)
def test_str_methods_off_the_list_are_refused(subsets, method):
    assert {"repeat", "pad", "cat", "encode", "extract", "split", "zfill"} <= set(OTHER_STR_METHODS)
    with pytest.raises(SubsetError, match=rf"Method \.{method}\(\) is not available in subset expressions"):
        subsets.add("bad", f"text.str.{method}(1) == 'x'")
    assert "bad" not in subsets


def test_indices_mask_and_functions(store, subsets):
    n = store.n_instances
    mine = subsets.add("mine", indices=[5, 1, 5, 7])
    assert subsets.indices(mine).tolist() == [1, 5, 7]
    mask = np.zeros(n, bool)
    mask[::10] = True
    np.testing.assert_array_equal(subsets.mask(subsets.add("every tenth", mask=mask)), mask)
    old = subsets.add("old", where=lambda df: df.age > 60)
    np.testing.assert_array_equal(subsets.mask(old), store.instances.age.to_numpy() > 60)
    assert old.kind == "indices" and "lambda df: df.age > 60" in old.describe()

    def first_of_each_class(df):
        return df.groupby("label").head(1).index.to_numpy()

    firsts = subsets.add("firsts", where=first_of_each_class)
    assert subsets.size(firsts) == 3
    assert "def first_of_each_class" in firsts.describe()
    # the function may not harm the store's table
    subsets.add("mutating", where=lambda df: df.assign(age=0).age == 0)
    assert store.instances.age.max() > 0

    for kwargs, message in [
        ({"indices": [0, n]}, "out of range"), ({"indices": [-1]}, "out of range"),
        ({"indices": [0.5]}, "must be integers"), ({"indices": mask}, "pass them as mask="),
        ({"mask": mask[:-1]}, f"must be {n} True/False"), ({"mask": mask.astype(int)}, "True/False"),
        ({"where": 3}, "must be a function"), ({"where": lambda df: df.age + 1000}, "out of range"),
    ]:
        with pytest.raises(SubsetError, match=message):
            subsets.add("bad", **kwargs)
    with pytest.raises(SubsetError, match="exactly one"):
        subsets.add("bad", "age > 1", indices=[1])
    with pytest.raises(SubsetError, match="exactly one"):
        subsets.add("bad")
    with pytest.raises(SubsetError, match="non-empty string"):
        subsets.add(" ", "age > 1")
    assert "bad" not in subsets


def test_combinations(store, subsets):
    df = store.instances
    a = subsets.add("old", "age > 60")
    b = subsets.add("sporty", "topic == 'sports'")
    cases = {
        "both": (subsets["old"] & subsets["sporty"], (df.age > 60) & (df.topic == "sports")),
        "either": (a | b, (df.age > 60) | (df.topic == "sports")),
        "not old": (~a, ~(df.age > 60)),
        "old, not sporty": (a & ~b, (df.age > 60) & (df.topic != "sports")),
        "with a string": (a & "label == 1", (df.age > 60) & (df.label == 1)),
        "string first": ("label == 1" | b, (df.label == 1) | (df.topic == "sports")),
        "three": (a & b & "label == 0", (df.age > 60) & (df.topic == "sports") & (df.label == 0)),
    }
    for name, (definition, expected) in cases.items():
        subsets.add(name, definition)
        np.testing.assert_array_equal(subsets.mask(name), expected.to_numpy(), err_msg=name)
    assert subsets["old, not sporty"].describe() == "old & ~sporty"
    assert subsets["three"].describe() == "old & sporty & (label == 0)"
    assert (~~a).key == a.key
    assert (a & b).key == (subsets["old"] & subsets["sporty"]).key
    # a combination is a snapshot: redefining a part later does not change it
    subsets.add("old", "age > 80")
    np.testing.assert_array_equal(subsets.mask("both"), cases["both"][1].to_numpy())
    with pytest.raises(TypeError, match="Cannot combine"):
        a & 3  # noqa: B018


def test_table(store, subsets):
    subsets.by_class()
    subsets.add("mine", indices=[1, 2])
    table = subsets.table()
    assert list(table.columns) == ["name", "kind", "definition", "size", "fraction"]
    assert table.name.tolist() == ["true cat", "true dog", "true bird", "mine"]
    assert table.loc[3, "definition"] == "2 chosen instances" and table.loc[3, "size"] == 2
    assert table["size"][:3].sum() == store.n_instances
    assert table.loc[0, "fraction"] == pytest.approx(table.loc[0, "size"] / store.n_instances)


def test_persistence_round_trip(tmp_path, store, subsets):
    subsets.by_class()
    subsets.add("old", where=lambda df: df.age > 60)
    subsets.add("old sporty", subsets["old"] & "topic == 'sports'")
    subsets.add("mine", indices=[3, 4])
    subsets.remove("true dog")
    data = json.loads((store.path / "subsets" / "subsets.json").read_text())  # JSON, never pickle
    assert [e["name"] for e in data["subsets"]] == ["true cat", "true bird", "old", "old sporty", "mine"]
    assert data["subsets"][2]["definition"]["kind"] == "indices"  # a function is saved as its index set

    reopened = Subsets(open_store(store.path))
    assert reopened.names == subsets.names
    for name in subsets:
        assert reopened[name] == subsets[name]
        np.testing.assert_array_equal(reopened.mask(name), subsets.mask(name))
    assert "lambda df: df.age > 60" in reopened["old"].describe()

    # another notebook's change is seen after reload(); re-adding a name replaces it
    subsets.add("mine", indices=[9])
    assert reopened.indices("mine").tolist() == [3, 4]
    assert reopened.reload().indices("mine").tolist() == [9]
    with pytest.raises(KeyError, match=r"No subset named 'true dgo'. Did you mean 'true dog'\?|No subset"):
        subsets.remove("true dgo")


def test_corrupt_file_is_a_clear_error_and_left_alone(store, subsets):
    subsets.add("x", "age > 1")
    path = subsets.path
    path.write_text("{not json")
    with pytest.raises(SubsetError, match="Cannot read the saved subsets.*left as it is"):
        Subsets(store)
    assert path.read_text() == "{not json"
    path.write_text(json.dumps({"format": "activis.subsets", "version": 99, "subsets": []}))
    with pytest.raises(SubsetError, match="newer"):
        Subsets(store)
    damaged = {"format": "activis.subsets", "version": 1,
               "subsets": [{"name": "x", "definition": {"kind": "and", "parts": [{"kind": "indices"}]}}]}
    path.write_text(json.dumps(damaged))
    with pytest.raises(SubsetError, match="Cannot read the saved subsets.*non-negative integers"):
        Subsets(store)


def test_unwritable_store_keeps_subsets_in_memory(store, monkeypatch):
    def refuse(name):
        raise PermissionError("read-only")

    monkeypatch.setattr(store, "section", refuse)
    subsets = Subsets(store)
    with pytest.warns(UserWarning, match="not writable"):
        subsets.add("x", "age > 1")
    assert subsets.size("x") == int((store.instances.age > 1).sum())


def test_observers(subsets):
    seen = []
    subsets.observe(lambda s: seen.append(s.names))
    subsets.by_class()
    subsets.by_class()  # already defined as asked: no rewrite, no notification
    subsets.add("x", "age > 1")
    subsets.remove("x")
    assert seen == [["true cat", "true dog", "true bird"], ["true cat", "true dog", "true bird", "x"],
                    ["true cat", "true dog", "true bird"]]


def test_queries_follow_a_growing_store(tmp_path):
    rng = np.random.default_rng(3)
    writer = StoreWriter(tmp_path / "growing", layers={"fc": LayerSpec(4, "float32")}, n_outputs=2,
                         class_names=["a", "b"], n_expected=40)

    def batch(labels):
        n = len(labels)
        writer.append(activations={"fc": rng.random((n, 4))}, label=labels, pred=labels,
                      confidence=np.ones(n), outputs=np.eye(2)[labels])

    batch(np.array([0, 1] * 10))
    store = open_store(tmp_path / "growing")
    subsets = Subsets(store)
    subsets.add("b", "label == 1")
    frozen = subsets.add("frozen", where=lambda df: df.label == 1)
    assert subsets.size("b") == 10 and subsets.size(frozen) == 10
    batch(np.array([1] * 20))
    store.reload()
    assert store.n_instances == 40
    assert subsets.size("b") == 30       # a query is evaluated live
    assert subsets.size("frozen") == 10  # a function subset is the index set it evaluated to
    assert subsets.mask("frozen").shape == (40,)


def test_subset_objects(tmp_path):
    s = Subset.query("label == 1")
    assert s.kind == "query" and repr(s) == "<Subset label == 1>"
    assert Subset.query("label == 1") == s and hash(Subset.query("label == 1")) == hash(s)
    with pytest.raises(SubsetError, match="Cannot parse"):
        Subset.query("label ==")
    for bad, message in [({"kind": "sql", "expr": "1"}, "Unknown subset definition kind 'sql'"),
                         ({"kind": "and"}, "non-empty list of parts"),
                         ({"kind": "or", "parts": [{"kind": "query", "expr": "x >"}]}, "Cannot parse"),
                         ({"kind": "not", "part": "label == 1"}, "Unknown subset definition kind None"),
                         ({"kind": "indices", "indices": ["1"]}, "non-negative integers"),
                         ({"kind": "indices", "indices": [[1]]}, "non-negative integers")]:
        with pytest.raises(SubsetError, match=message):
            Subset(bad)
    with pytest.raises(SubsetError, match="non-negative"):
        Subset.from_indices([-3])
    assert Subset.from_indices([]).describe() == "0 chosen instances"


def test_imports_no_torch_and_no_widget():
    import subprocess
    import sys

    code = ("import sys, activis.subsets; "
            "print(sorted(m for m in ('torch', 'anywidget', 'ipywidgets', 'numba') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # numba too: it is imported at the first aggregation only
