"""Each view's synced trait names, by the JS bundle it loads: what the lint checks the JS against.

``python -m activis.widgets.trait_names`` prints ``{"activation_matrix": ["layer", ...], ...}``.
``js/lint/traits.mjs`` (an ESLint rule of ``npm run lint``) runs it and refuses a trait name that a
view's JS reads, writes or follows but its Python widget does not sync: such a name is silently
``undefined`` in the browser, and no test of the view notices.
"""

from __future__ import annotations

import importlib
import json
import pkgutil

from anywidget import AnyWidget

from ._base import STATIC


def synced_trait_names() -> dict[str, list[str]]:
    """Bundle name -> the synced traits of the widget that loads it (every widget of activis.widgets).

    A widget's bundle is found by its code (anywidget keeps the file's text, not its name)."""
    bundles = {path.read_text(encoding="utf-8"): path.stem for path in STATIC.glob("*.js")}
    package = importlib.import_module(__package__)
    names: dict[str, set[str]] = {}
    for module in pkgutil.iter_modules(package.__path__):
        loaded = importlib.import_module(f"{__package__}.{module.name}")
        for cls in vars(loaded).values():
            if isinstance(cls, type) and issubclass(cls, AnyWidget) and str(getattr(cls, "_esm", "")) in bundles:
                names.setdefault(bundles[str(cls._esm)], set()).update(cls.class_trait_names(sync=True))
    return {bundle: sorted(traits) for bundle, traits in sorted(names.items())}

if __name__ == "__main__":
    print(json.dumps(synced_trait_names(), indent=1))
