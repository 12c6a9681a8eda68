"""softfp8/_env.py: the table of SOFTFP8_* settings against the parsers that read them, and
`check_environment` (what a value or a name that softfp8 won't take does). Each variable's
invalid value through a layer call is tested beside the module that reads it (test_dispatch,
test_triton, test_splitk, test_numba)."""
import warnings

import pytest

from softfp8 import _env
from softfp8.dispatch import ActivationQuant, Backend, E2M1Decode


def _parsers() -> dict[str, tuple[str, ...]]:
    """The values each reader takes, from the reader's own module."""
    takes = {"SOFTFP8_BACKEND": tuple(b.value for b in Backend),
             "SOFTFP8_E2M1_DECODE": tuple(d.value for d in E2M1Decode),
             "SOFTFP8_ACTIVATION_QUANT": tuple(a.value for a in ActivationQuant)}
    try:
        from softfp8.backends.triton import _splitk, _table
    except ImportError:  # no Triton backend in this build: its settings go unchecked here
        return takes
    takes["SOFTFP8_PDL"] = ("auto", *_table._PDL_MODES)
    takes["SOFTFP8_SPLITK_REDUCE"] = tuple(r.value for r in _splitk.SplitKReduce)
    return takes


@pytest.mark.parametrize("name, values", sorted(_parsers().items()))
def test_settings_take_what_their_readers_parse(name, values):
    assert set(_env.SETTINGS[name].values) == set(values)


def test_check_takes_case_and_space_and_names_the_valid_values():
    lut = _env.SETTINGS["SOFTFP8_NUMBA_FP4_LUT"]
    assert lut.check(" AVX2 ") == "avx2"
    with pytest.raises(ValueError, match=r"^SOFTFP8_NUMBA_FP4_LUT='avx3' is not valid; expected "
                                         r"one of '1', '0', 'avx2', 'avx512'$"):
        lut.check("avx3")
    prefetch = _env.SETTINGS["SOFTFP8_PDL_PREFETCH"]
    assert prefetch.check(" 32768") == "32768"
    for bad in ("100", "-16", "32k"):
        with pytest.raises(ValueError, match=f"SOFTFP8_PDL_PREFETCH='{bad}' is not valid; "
                                             "expected a multiple of 16"):
            prefetch.check(bad)


def test_check_environment_raises_for_a_value_and_ignores_empty(monkeypatch):
    for name in _env.SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SOFTFP8_SPLITK_REDUCE", "")  # empty: as unset
    _env.check_environment()
    monkeypatch.setenv("SOFTFP8_SPLITK_REDUCE", "later")
    with pytest.raises(ValueError, match="SOFTFP8_SPLITK_REDUCE='later' is not valid; expected "
                                         "one of 'last', 'kernel'"):
        _env.check_environment()


def test_a_name_no_setting_has_warns_once(monkeypatch):
    for name in _env.SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SOFTFP8_BACKNED", "numba")  # misspelt: read by nothing
    monkeypatch.setattr(_env, "_WARNED", set())
    with pytest.warns(UserWarning, match="SOFTFP8_BACKNED is set, but softfp8 reads no such "
                                         "variable.*SOFTFP8_BACKEND"):
        _env.check_environment()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _env.check_environment()  # told once
