"""Settings: every environment variable is a documented field of one record, read by one parser, and no
other module reads the environment."""

import ast
import dataclasses
from pathlib import Path

import pytest

from opennki import environment as env
from opennki.sim import SimOptions

SRC = Path(__file__).resolve().parents[2] / "src" / "opennki"


def test_no_module_but_the_settings_reads_or_writes_the_environment():
    readers = []
    for path in SRC.rglob("*.py"):
        if path.name == "environment.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            # os.environ.get(...), os.environ[...] read, os.getenv(...)
            if isinstance(node, ast.Attribute) and node.attr in ("getenv", "environ") \
                    and getattr(node.value, "id", None) == "os":
                readers.append((path.relative_to(SRC).as_posix(), node.lineno))
    assert readers == []


def test_the_one_writer_writes_what_the_parser_reads_back():
    environ = {}
    for name, value, text in (("target", "trn2", "trn2"), ("simulator", True, "1"), ("precise_fp", False, "0"),
                              ("lnc", 2, "2"), ("compiler_flags", ("--lnc=2", "-O1"), "--lnc=2 -O1")):
        env.put(name, value, environ)
        assert environ[env.VARIABLES[name]] == text and env.setting(name, environ) == value
    env.put("target", None, environ)
    assert env.VARIABLES["target"] not in environ and env.setting("target", environ) is None
    with pytest.raises(ValueError, match="NEURON_LOGICAL_NC_CONFIG"):
        env.put("lnc", -1, environ)                         # a number setting holds non-negative integers


def test_the_command_line_sets_the_target_through_the_settings(tmp_path, monkeypatch, capsys):
    from opennki import cli
    monkeypatch.delenv(env.VARIABLES["target"], raising=False)
    script = tmp_path / "script.py"
    script.write_text("import os\nprint('target', os.environ.get(%r))\n" % env.VARIABLES["target"])
    assert cli.main(["check", "--target", "trn2", str(script)]) == 0
    assert "target trn2" in capsys.readouterr().out
    assert env.setting("target") == "trn2"


def test_every_setting_names_its_variable_kind_and_meaning():
    kinds = {"flag", "text", "lower", "number", "words"}
    names = set()
    for f in dataclasses.fields(env.Environment):
        assert f.metadata["kind"] in kinds and len(f.metadata["doc"]) > 20, f.name
        names.add(f.metadata["variable"])
    assert len(names) == len(env.FIELDS)                # one field per variable


def test_one_parser_for_every_kind():
    assert env.setting("precise_fp", {}) is True                  # unset: the default
    assert env.setting("precise_fp", {"NKI_PRECISE_FP": ""}) is True
    for off in ("0", "false", "No", " OFF "):
        assert env.setting("precise_fp", {"NKI_PRECISE_FP": off}) is False
    for on in ("1", "true", "yes", "TRUE"):
        assert env.setting("simulator", {"NKI_SIMULATOR": on}) is True
    assert env.setting("lnc", {"NEURON_LOGICAL_NC_CONFIG": " 2 "}) == 2
    assert env.setting("lnc", {"NEURON_LOGICAL_NC_CONFIG": "two"}) is None
    assert env.setting("compiler_flags", {"NEURON_CC_FLAGS": "--verbose  --lnc=1"}) == ("--verbose", "--lnc=1")
    assert env.setting("compiler_frontend", {"NKI_COMPILER_FRONTEND": " Custom "}) == "custom"
    assert env.setting("api_version", {"OPENNKI_API_VERSION": " 0.6 "}) == "0.6"
    whole = env.environment({"OPENNKI_UNINITIALIZED": "raise", "NEURON_PLATFORM_TARGET_OVERRIDE": "trn2"})
    assert (whole.uninitialized, whole.target, whole.detect_races) == ("raise", "trn2", False)


def test_sim_options_take_their_defaults_from_the_settings(monkeypatch):
    from_env = {f.name: f.metadata["setting"] for f in dataclasses.fields(SimOptions) if "setting" in f.metadata}
    assert set(from_env.values()) <= set(env.FIELDS)
    assert {"precise_fp", "hardware_strict", "detect_races", "uninitialized", "api_version"} <= set(from_env)
    monkeypatch.setenv("OPENNKI_DETECT_RACES", "1")
    monkeypatch.setenv("NKI_PRECISE_FP", "off")
    options = SimOptions()
    assert options.detect_races is True and options.precise_fp is False
    assert SimOptions(detect_races=False).detect_races is False       # a given option wins
    monkeypatch.setenv("OPENNKI_UNINITIALIZED", "sometimes")
    with pytest.raises(ValueError, match="uninitialized"):
        SimOptions()
