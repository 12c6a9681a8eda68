"""Bad input to the entry points other branches are adding: softfp8.Linear, quantize_model, probe
and the two CLIs. Each test skips, naming what is missing, until its entry point is merged; then
it runs as is. They use only the public names of DESIGN.md §4."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from conftest import rel_err

import softfp8


def _linear_layer(n=6, k=40, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Linear(k, n)


# -- softfp8.Linear ------------------------------------------------------------------------

def test_linear_module_from_linear_bad_input():
    Linear = softfp8.Linear
    with pytest.raises(TypeError, match="linear"):
        Linear.from_linear(torch.randn(6, 40), fmt="e5m2")
    with pytest.raises(ValueError, match="fmt='fp3'"):
        Linear.from_linear(_linear_layer(), fmt="fp3")


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3", "nvfp4", "mxfp4"])
def test_linear_module_bad_activation(fmt):
    Linear = softfp8.Linear
    layer = Linear.from_linear(_linear_layer(), fmt=fmt)
    with pytest.raises(ValueError, match="x.*40"):
        layer(torch.randn(2, 41))
    with pytest.raises(TypeError, match="x"):
        layer(torch.ones(2, 40, dtype=torch.int32))
    with pytest.raises(ValueError, match="meta"):
        layer(torch.randn(2, 40, device="meta"))


def _corrupted_state_dicts(sd):
    """Each entry changed in dtype, in shape, or removed: what a damaged checkpoint holds."""
    for key, t in sd.items():
        if not isinstance(t, torch.Tensor):
            continue
        # Lossy casts that torch's copy_ would do silently: float codes into int32 words, and
        # scales truncated to integers. (A bias cast is torch's own business, as in nn.Linear.)
        if not key.endswith("bias"):
            other = torch.int32 if t.is_floating_point() else torch.float64
            yield f"{key}-dtype", {**sd, key: t.to(other)}
        if t.dim() > 0 and t.shape[0] > 1:
            yield f"{key}-shape", {**sd, key: t[:-1].clone()}
        yield f"{key}-missing", {k: v for k, v in sd.items() if k != key}


@pytest.mark.parametrize("fmt", ["e4m3", "nvfp4", "mxfp4"])
def test_linear_module_corrupted_state_dict_is_refused(fmt):
    """Loading a damaged state_dict must raise and name the entry — torch's default copy_ would
    silently cast a float64 `words` into int32, a silent wrong result."""
    Linear = softfp8.Linear
    good = Linear.from_linear(_linear_layer(), fmt=fmt)
    sd = good.state_dict()
    x = torch.randn(3, 40)
    want = good(x)
    for name, bad in _corrupted_state_dicts(sd):
        layer = Linear.from_linear(_linear_layer(seed=1), fmt=fmt)
        with pytest.raises((ValueError, TypeError, RuntimeError),
                           match=name.rsplit("-", 1)[0].split(".")[-1]):
            layer.load_state_dict(bad)
    layer = Linear.from_linear(_linear_layer(seed=1), fmt=fmt)
    layer.load_state_dict(sd)
    assert torch.equal(layer(x), want)


# -- quantize_model ------------------------------------------------------------------------

def test_quantize_model_bad_input():
    quantize_model = softfp8.quantize_model
    with pytest.raises(TypeError, match="model"):
        quantize_model(torch.randn(3, 3), fmt="e5m2")
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    with pytest.raises(ValueError, match="fmt='int3'"):
        quantize_model(model, fmt="int3")
    assert isinstance(model[0], torch.nn.Linear)  # a refused call changed nothing


def test_quantize_model_odd_shapes_stay_close():
    quantize_model = softfp8.quantize_model
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(33, 17), torch.nn.ReLU(), torch.nn.Linear(17, 3))
    x = torch.randn(5, 33)
    want = model(x).detach()
    quantize_model(model, fmt="e4m3")
    assert rel_err(model(x).detach(), want) < 0.1


# -- probe and the CLIs --------------------------------------------------------------------

def test_probe_never_raises_and_is_cached():
    probe = softfp8.capability.probe
    import dataclasses

    a, b = probe(), probe()
    assert a is b or a == b
    # a refresh measures again: the same facts, its own duration aside
    fresh = probe(refresh=True)
    assert dataclasses.replace(fresh, probe_seconds=0.0) == dataclasses.replace(a, probe_seconds=0.0)


ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run_cli(module, *args, timeout=120):
    # The checkout under test, not whatever softfp8 is installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT),
                                                                     os.environ.get("PYTHONPATH"))))}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def _usage_error(done):
    """argparse's refusal: exit status 2, a usage line, no traceback."""
    return done.returncode == 2 and "usage" in done.stderr and "Traceback" not in done.stderr


def test_probe_cli_json_and_bad_flag():
    done = _run_cli("softfp8.probe", "--json")
    assert done.returncode == 0, done.stderr
    assert isinstance(json.loads(done.stdout), dict)
    assert _usage_error(_run_cli("softfp8.probe", "--no-such-flag"))


def test_probe_cli_with_unknown_backend_env_reports_not_crashes(monkeypatch):
    monkeypatch.setenv("SOFTFP8_BACKEND", "no-such-backend")
    done = _run_cli("softfp8.probe")
    assert "Traceback" not in done.stderr
    assert "SOFTFP8_BACKEND" in done.stdout + done.stderr


def test_bench_cli_bad_flag_and_shape():
    assert _usage_error(_run_cli("softfp8.bench", "--no-such-flag"))
    bad = _run_cli("softfp8.bench", "shapes", "--shape", "not,a,shape")
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
