"""Config files for the command lines: a run, a sweep or a search written down in a YAML or JSON file and replayed.

    python -m fda_ray --config run.yaml                    # every flag has a key: `lr_target: 0.005`
    python -m fda_ray --config run.yaml --rounds 5         # a flag on the command line overrides the file
    python -m fda_ray --method fedgp --print-config        # the resolved file: every option with its value

A file is a mapping from option names (a flag without its dashes, `-` or `_` alike: `lr_target`, `lr-target`,
`fssda_kd_temperature`) to values. The values become the flag's own text before the command line's flags, so a
file goes through the same parsing, types and one-line errors as the flags themselves, and a flag given on the
command line wins (argparse keeps the last). `null` leaves an option at its default; `true`/`false` set a switch
(`--filter` / `--no-filter`), and for an option that takes a word they are `on`/`off` (YAML reads an unquoted
`vectorise: off` or `fuse: off` as false); a list fills an option that takes several values (`eval_noise: [0.2, 0.4]`) or is
joined with commas for one that takes a comma list (`methods: [fedgp, fedda]`; such an option is marked `comma_list`, or
is --import's append), and is refused for an option that takes one value (`noise: [0.4]`). `--print-config` writes every
option the command has, with the value it would use, in the file's format (YAML, or JSON with --print-config
json), and exits: feeding it back through --config gives the same parse.
"""
from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any

FORMATS = ("yaml", "json")
OWN = ("help", "config", "print_config")  # the options that are about the file itself


class ConfigFileError(ValueError):
    """A config file that cannot be used: one line naming the file, the key or the value, and what is allowed."""


def read_mapping(path: str | Path, field: str = "config", mapping: str = "a mapping of option names to values"
                 ) -> dict[str, Any]:
    """The file's mapping: YAML (.yaml, .yml) or JSON (.json, or any other name whose text is JSON). Every way the
    file can fail (absent, a directory, binary, not UTF-8, not YAML or JSON, not a mapping) is one ConfigFileError
    line `<field>=<path> is invalid: <why>`; `mapping` says what the file should hold (a grid file: its keys)."""
    from fda_ray.core.user_files import DamagedFileError, read_text

    p = Path(path)
    try:
        text = read_text(p, field)
    except DamagedFileError as e:
        raise ConfigFileError(str(e)) from None
    if p.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml_load(text)
        except yaml.YAMLError as e:
            raise ConfigFileError(f"{field}={str(path)!r} is invalid: not YAML ({_yaml_problem(e)})") from None
        except RecursionError:  # lists in lists thousands deep: the parsers recurse once a level
            raise ConfigFileError(f"{field}={str(path)!r} is invalid: not YAML (nested too deeply)") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigFileError(f"{field}={str(path)!r} is invalid: not JSON ({e.msg} at line {e.lineno}); "
                                  "name a YAML file .yaml or .yml") from None
        except RecursionError:
            raise ConfigFileError(f"{field}={str(path)!r} is invalid: not JSON (nested too deeply)") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        held = f"; it holds a {type(data).__name__}" if not isinstance(data, dict) else "; a key is not a name"
        raise ConfigFileError(f"{field}={str(path)!r} is invalid: {mapping}{held}")
    return data


_FLOAT_12 = r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$"""


def yaml_load(text: str) -> Any:
    """YAML as a researcher writes it: PyYAML's safe loader with YAML 1.2's floats. PyYAML follows YAML 1.1, where
    `1e-3` (no dot) and `1.0e12` (no sign) are strings: `lr_source: 1e-3` was refused as "'1e-3' is invalid: a
    finite number > 0". Everything else reads as safe_load reads it."""
    import yaml

    return yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader)


@functools.lru_cache(maxsize=1)
def _loader() -> type:
    """PyYAML's SafeLoader with _FLOAT_12 as its float resolver, built once (a subclass: SafeLoader's own resolvers
    stay as they are for everyone else)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {k: [r for r in v if r[0] != "tag:yaml.org,2002:float"]
                                      for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(_FLOAT_12, re.X), list("-+0123456789."))
    return Loader


def _yaml_problem(e: Exception) -> str:
    """A YAML error in a few words with where it is (PyYAML's first line names only the context: "while parsing a
    flow node")."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} at line {mark.line + 1} column {mark.column + 1}"
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _negative(flag: str, action: argparse.Action) -> bool:
    """--no-X of a switch that also has --X (BooleanOptionalAction): the file says `X: false` instead. A flag of its
    own that starts with --no- (--no-figures) is an option like any other: `no_figures: true`."""
    return flag.startswith("--no-") and "--" + flag[len("--no-"):] in action.option_strings


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Option name (underscores) -> its action, for every long option but the file's own."""
    out = {}
    for action in parser._actions:  # argparse keeps no public list of its actions
        for flag in action.option_strings:
            if flag.startswith("--") and not _negative(flag, action):
                name = flag[2:].replace("-", "_")
                if action.dest not in OWN:
                    out[name] = action
    return out


def _key(action: argparse.Action) -> str:
    return next(f for f in action.option_strings if f.startswith("--") and not _negative(f, action))[2:] \
        .replace("-", "_")


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)  # repr: the float's shortest exact text


def _boolean_word(action: argparse.Action, value: bool) -> str:
    """A YAML boolean for an option that is not a switch: the word the option takes (on/off, or true/false for a
    family's boolean parameter: its choices or words hold it; a text option: on/off, --fuse, --vectorise), else the
    boolean's own text, which an option with a parser of its own reads (--resume: true/false)."""
    words = getattr(action, "words", None) or action.choices  # (a family's word option names its words: words)
    for word in (("on" if value else "off"), ("true" if value else "false")):
        if words is not None and word in words:
            return word
    if words is not None:
        return _text(value)
    return ("on" if value else "off") if action.type in (None, str) else _text(value)


def _check_values(action: argparse.Action, raw: str, source: str, texts: list[str]) -> None:
    """The option's own type and choices over a key's values, so that a bad value names the file and the key (the
    parse would name only the flag: `argument --seeds: invalid int value`)."""
    for text in texts:
        if callable(action.type):
            try:
                value = action.type(text)
            except argparse.ArgumentTypeError as e:
                raise ConfigFileError(f"{e} (config key {raw!r} in {source})") from None
            except (TypeError, ValueError):
                kind = getattr(action.type, "__name__", "value")
                raise ConfigFileError(f"config key {raw!r} in {source} is invalid: {text!r}; "
                                      f"{'an integer' if kind == 'int' else 'a number' if kind == 'float' else kind}"
                                      ) from None
        else:
            value = text
        if action.choices is not None and value not in action.choices:
            raise ConfigFileError(f"config key {raw!r} in {source} is invalid: {text!r}; one of "
                                  f"{', '.join(map(str, action.choices))}")


def to_argv(parser: argparse.ArgumentParser, mapping: dict[str, Any], source: str) -> list[str]:
    """The flags that say what `mapping` says (the module docstring's rules), for `parser`; a value the option's
    type or choices refuse is one ConfigFileError naming the file and the key."""
    options = _options(parser)
    argv: list[str] = []
    for raw, value in mapping.items():
        name = raw.replace("-", "_")
        if name not in options:
            raise ConfigFileError(f"config key {raw!r} in {source} is invalid: not an option of {parser.prog} "
                                  f"({parser.prog} --help lists them)")
        action = options[name]
        flag = "--" + _key(action).replace("_", "-")
        if value is None:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            if not isinstance(value, bool):
                raise ConfigFileError(f"config key {raw!r} in {source} is invalid: {value!r}; true or false")
            argv.append(flag if value else "--no-" + flag[2:])  # (its --no- form: _negative)
        elif action.nargs == 0:  # store_true
            if not isinstance(value, bool):
                raise ConfigFileError(f"config key {raw!r} in {source} is invalid: {value!r}; true or false")
            if value:
                argv.append(flag)
        else:
            if action.nargs in ("*", "+"):
                texts = [_text(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
            elif isinstance(value, (list, tuple)):
                if not (getattr(action, "comma_list", False) or isinstance(action, argparse._AppendAction)):
                    raise ConfigFileError(f"config key {raw!r} in {source} is invalid: a list ({value!r}); one value "
                                          f"(--{_key(action).replace('_', '-')} takes one)")
                texts = [",".join(_text(v) for v in value)]
            elif isinstance(value, dict):
                raise ConfigFileError(f"config key {raw!r} in {source} is invalid: a mapping; a value or a list")
            elif isinstance(value, bool):  # YAML reads an unquoted off/on (no/yes) as a boolean: `fuse: off` is off
                texts = [_boolean_word(action, value)]
            else:
                texts = [_text(value)]
            _check_values(action, raw, source, texts)
            if len(texts) == 1 and texts[0].startswith("-"):  # a value argparse would take for a flag: joined to
                argv.append(f"{flag}={texts[0]}")             # its option (data_dir: "-x" was "expected one argument")
            else:
                argv += [flag, *texts]
    return argv


def from_namespace(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> dict[str, Any]:
    """Every option `ns` holds, by its file key, with its value (tuples as lists): the resolved file."""
    out: dict[str, Any] = {}
    for name, action in _options(parser).items():
        if hasattr(ns, action.dest) and name not in out:
            value = getattr(ns, action.dest)
            if isinstance(action, argparse._AppendAction) and not value:
                continue  # (--import not given: no key)
            out[name] = list(value) if isinstance(value, tuple) else value
    return out


def dump(mapping: dict[str, Any], fmt: str = "yaml") -> str:
    if fmt == "json":
        return json.dumps(mapping, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(mapping, sort_keys=False, default_flow_style=None)


def add_config_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("config file")
    g.add_argument("--config", default=None, metavar="FILE",
                   help="read options from a YAML (.yaml, .yml) or JSON file; flags given here override it")
    g.add_argument("--print-config", nargs="?", const="yaml", default=None, choices=FORMATS,
                   help="print every option with the value it would use, as a config file (yaml, or json), and exit")


def expand(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """argv with `--config FILE` replaced by the file's flags, placed first so that the command line's win; and,
    for `blamed`, where the file says each option the command line does not override."""
    out, i, files = [], 0, []
    while i < len(argv):
        x = argv[i]
        if x == "--config":
            if i + 1 >= len(argv) or argv[i + 1].startswith("--"):  # (the next flag is not the file: --config ./--x)
                raise ConfigFileError("config is invalid: --config needs a file")
            files.append(argv[i + 1])
            i += 2
            continue
        if x.startswith("--config="):
            if not x[len("--config="):]:  # (Path('') is '.', which would be named as a directory)
                raise ConfigFileError("config='' is invalid: --config needs a file")
            files.append(x[len("--config="):])
        else:
            out.append(x)
        i += 1
    if len(files) > 1:
        raise ConfigFileError(f"config={files[1]!r} is invalid: one --config a command ({files[0]!r} is given)")
    if not files:
        return out, {}
    mapping = read_mapping(files[0])
    given = {x.split("=")[0] for x in out if x.startswith("--")}
    options = _options(parser)
    blame = {}  # option name -> where the file says it, for the keys the command line does not override
    for raw in mapping:
        action = options.get(raw.replace("-", "_"))
        if action is not None and not given.intersection(action.option_strings):
            blame[raw.replace("-", "_")] = f"config key {raw!r} in {files[0]}"
    return to_argv(parser, mapping, files[0]) + out, blame


def blamed(message: str, blame: dict[str, str]) -> str:
    """A one-line error `<field>=<value> is invalid: ...` raised after the parse (RunConfig's checks), with where a
    config file says that field: `(config key 'rounds' in run.yaml)`. A family parameter's field is
    `<family>.<name>`, its option `<family>_<name>`."""
    field = message.split("=", 1)[0] if "=" in message else ""
    where = blame.get(field.replace(".", "_").replace("-", "_")) if field.isidentifier() or "." in field else None
    return f"{message} ({where})" if where else message
