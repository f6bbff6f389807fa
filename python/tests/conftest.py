"""Fixtures shared by the package's tests."""
import os
import shutil
import subprocess

import pytest


@pytest.fixture(scope="session")
def cli():
    """The h3strict CLI the tests compare against: $H3S_CLI, else `h3strict` on PATH (the package installs it)."""
    path = os.environ.get("H3S_CLI") or shutil.which("h3strict")
    if not path:
        pytest.fail("no h3strict CLI: set H3S_CLI or install the package (pip install .), which installs it")
    return path


@pytest.fixture(scope="session")
def run_cli(cli):
    """run_cli(*args): the CLI with these arguments (str() of each), output discarded; a failure raises."""
    def run(*args):
        subprocess.run([cli, *map(str, args)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return run
