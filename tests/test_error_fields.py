"""A refused method argument is named as a config writes it (method.init_args.NAME), wherever it is refused."""

import re
from pathlib import Path

import fedclust

# A ConfigError whose field starts "method." but not "method.init_args." or "method.class_path"
SHORT_FIELD = re.compile(r"""ConfigError\(\s*f?["']method\.(?!init_args\.|class_path)""")


def test_every_method_field_in_an_error_is_named_under_init_args():
    root = Path(fedclust.__file__).parent
    short = [f"{path.relative_to(root)}:{text[:match.start()].count(chr(10)) + 1}"
             for path in sorted(root.rglob("*.py")) for text in [path.read_text()]
             for match in SHORT_FIELD.finditer(text)]
    assert not short, f"name the field method.init_args.NAME (as a config writes it): {short}"


def test_the_pattern_finds_a_short_field():
    assert SHORT_FIELD.search('raise ConfigError("method.lr", lr, "a positive learning rate")')
    assert SHORT_FIELD.search("ConfigError(\n    f'method.{name}', v, 'x')")
    assert not SHORT_FIELD.search('ConfigError("method.init_args.lr", lr, "x")')
    assert not SHORT_FIELD.search('ConfigError("method.class_path", "KMeans", "x")')
