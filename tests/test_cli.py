import subprocess
import sys

from rnnprof.cli import main


def test_unknown_command_is_a_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_module_entry_point_prints_version():
    out = subprocess.run([sys.executable, "-m", "rnnprof", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("rnnprof ")
