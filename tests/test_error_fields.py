"""A refused method argument is named as a config writes it (method.init_args.NAME): MethodArgError holds the
prefix once, and library code refuses a method argument through it rather than spelling the field by hand."""

import re
from pathlib import Path

import pytest

import fedclust
from fedclust.errors import ConfigError, MethodArgError

# A ConfigError whose field is spelt under "method." (other than the method's class): MethodArgError's job
HAND_SPELT = re.compile(r"""ConfigError\(\s*f?["']method\.(?!class_path)""")


def test_a_method_argument_error_names_the_field_as_a_config_writes_it():
    with pytest.raises(ConfigError) as caught:
        raise MethodArgError("lr", -1.0, "a positive number")
    assert caught.value.field == "method.init_args.lr"
    assert str(caught.value) == "method.init_args.lr = -1.0 is not valid: a positive number."


def test_library_code_refuses_method_arguments_through_the_helper():
    root = Path(fedclust.__file__).parent
    spelt = [f"{path.relative_to(root)}:{text[:match.start()].count(chr(10)) + 1}"
             for path in sorted(root.rglob("*.py")) for text in [path.read_text()]
             for match in HAND_SPELT.finditer(text)]
    assert not spelt, f"refuse a method argument with MethodArgError(NAME, value, valid): {spelt}"


def test_the_pattern_finds_a_hand_spelt_field():
    assert HAND_SPELT.search('raise ConfigError("method.lr", lr, "a positive learning rate")')
    assert HAND_SPELT.search("ConfigError(\n    f'method.init_args.{name}', v, 'x')")
    assert not HAND_SPELT.search('MethodArgError("lr", lr, "x")')
    assert not HAND_SPELT.search('ConfigError("method.class_path", "KMeans", "x")')
