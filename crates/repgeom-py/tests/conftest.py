"""Shared helpers: the committed fixtures and the `repgeom` binary for parity checks."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PGA = ROOT / "fixtures" / "pga"


def cli_binary() -> pathlib.Path:
    """The `repgeom` binary: $REPGEOM_BIN, else the workspace's debug or release build."""
    env = os.environ.get("REPGEOM_BIN")
    candidates = [pathlib.Path(env)] if env else [ROOT / "target" / "debug" / "repgeom", ROOT / "target" / "release" / "repgeom"]
    for c in candidates:
        if c.is_file():
            return c
    pytest.fail(
        "the parity tests need the repgeom binary: run `cargo build -p repgeom-cli` or set REPGEOM_BIN "
        f"(looked at {', '.join(map(str, candidates))})"
    )


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs `repgeom ARGS --quiet` from the repository root."""
    return subprocess.run(
        [str(cli_binary()), *args, "--quiet"], cwd=ROOT, capture_output=True, text=True, check=check
    )


def cli_rows(*args: str) -> list[dict]:
    """`repgeom ARGS --format json`, parsed (one object per line)."""
    out = run_cli(*args, "--format", "json").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def acts() -> np.ndarray:
    return np.load(PGA / "acts.npy")


@pytest.fixture(scope="session")
def readout() -> np.ndarray:
    return np.load(PGA / "readout.npy")


@pytest.fixture(scope="session")
def null() -> np.ndarray:
    return np.load(PGA / "null_bases.npy")
