"""The test suite's own shards (tests/conftest.py, SOFTFP8_TEST_SHARD): each test in one shard."""
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent


def _collected(shard: str | None) -> tuple[int, list[str], str]:
    """(pytest's exit code, the test ids it collects, its whole output) for test_env.py's tests
    under SOFTFP8_TEST_SHARD=shard (unset for None)."""
    env = {k: v for k, v in os.environ.items() if k != "SOFTFP8_TEST_SHARD"}
    if shard is not None:
        env["SOFTFP8_TEST_SHARD"] = shard
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", str(TESTS / "test_env.py")],
                         capture_output=True, text=True, env=env, cwd=TESTS.parent)
    text = out.stdout + out.stderr
    return out.returncode, [line for line in text.splitlines() if "::" in line], text


def test_shards_split_a_selection_into_disjoint_parts_that_cover_it():
    rc, whole, _ = _collected(None)
    assert rc == 0 and len(whole) >= 6
    parts = []
    for i in (1, 2, 3):
        rc, part, _ = _collected(f"{i}/3")
        assert rc == 0 and part, (i, part)
        parts.append(part)
    assert sorted(sum(parts, [])) == sorted(whole)  # each test once, none lost


def test_a_bad_shard_is_refused_naming_the_variable():
    for bad in ("3/2", "1"):
        rc, _, text = _collected(bad)
        assert rc != 0 and "SOFTFP8_TEST_SHARD" in text, bad
