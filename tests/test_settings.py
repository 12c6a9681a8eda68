"""softfp8/_settings.py: the settings dispatch and the launch plan read, their defaults from the
environment (read once), `launch_settings` over them, and the token a recorded call checks.
(The launch settings' effect on plans: test_plan, test_triton_table; on a replay:
test_fastcall.)"""
import threading

import pytest
import torch

import softfp8
from softfp8 import Backend, _settings
from softfp8.dispatch import select

DISPATCH_ENV = {"backend": "SOFTFP8_BACKEND", "e2m1": "SOFTFP8_E2M1_DECODE",
                "activation_quant": "SOFTFP8_ACTIVATION_QUANT"}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in DISPATCH_ENV.values():
        monkeypatch.delenv(name, raising=False)


def test_the_dispatch_settings_come_from_the_environment_once(monkeypatch):
    monkeypatch.setenv("SOFTFP8_BACKEND", " Torch ")
    monkeypatch.setenv("SOFTFP8_E2M1_DECODE", "select")
    monkeypatch.setenv("SOFTFP8_ACTIVATION_QUANT", "")  # empty: unset
    first = _settings.current()
    assert (first.backend, first.e2m1, first.activation_quant) == ("torch", "select", "allow")
    assert first.from_env == {"backend", "e2m1"}
    assert first.source("backend") == "SOFTFP8_BACKEND=torch"
    assert first.source("activation_quant") == "default"
    monkeypatch.setenv("SOFTFP8_BACKEND", "numba")
    assert _settings.current() is first  # not read again
    assert select("e5m2", 1, "cpu").backend is Backend.TORCH
    assert _settings.reload_environment().backend == "numba"
    with softfp8.launch_settings(backend="torch") as inside:
        assert inside.source("backend") == "launch_settings(backend='torch')"
        assert inside.source("e2m1") == "SOFTFP8_E2M1_DECODE=select"  # the rest kept
        assert select("e5m2", 1, "cpu").backend is Backend.TORCH


@pytest.mark.parametrize("field, value, valid", [
    ("backend", "gpu", "'auto', 'native', 'triton', 'cuda', 'numba', 'torch'"),
    ("e2m1", "fast", "'auto', 'inject', 'select'"),
    ("activation_quant", "maybe", "'allow', 'forbid'"),
])
def test_a_typo_raises_naming_the_variable_or_the_setting_and_the_valid_values(
        monkeypatch, field, value, valid):
    env = DISPATCH_ENV[field]
    monkeypatch.setenv(env, value)
    for call in (_settings.current, lambda: softfp8.linear(torch.randn(1, 8),
                                                           softfp8.quantize(torch.randn(4, 8),
                                                                            "e5m2"))):
        with pytest.raises(ValueError, match=f"^{env}='{value}' is not valid; expected one of "
                                             f"{valid}$"):
            call()
    monkeypatch.delenv(env)
    with pytest.raises(ValueError, match=rf"^launch_settings\({field}='{value}'\) is not valid; "
                                         f"expected one of {valid}$"):
        softfp8.launch_settings(**{field: value}).__enter__()


def test_the_token_is_one_per_settings_in_force():
    """`generation()`: the same for equal settings (blocks of equal values share one object),
    another for other values, each thread its own, and new for all after `invalidate()`."""
    outside = _settings.generation()
    with softfp8.launch_settings(backend="torch") as first:
        torch_token = _settings.generation()
        assert torch_token != outside
        seen = []
        thread = threading.Thread(target=lambda: seen.append(_settings.generation()))
        thread.start()
        thread.join()
        assert seen == [outside]  # a block is this thread's
    assert _settings.generation() == outside
    with softfp8.launch_settings(backend="torch") as again:
        assert again is first and _settings.generation() == torch_token
        _settings.invalidate()
        assert _settings.generation() != torch_token
    assert _settings.generation() != outside
    with softfp8.launch_settings(backend=Backend.TORCH) as member:  # a member: its string
        assert member is first and member.backend == "torch"
