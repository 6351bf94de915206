"""deploy/'s files for containers and systemd, and the sample config files, read as their tools read
them: every command they run is one of the project's console scripts, every flag resolves through
that daemon's own option loader, every path they copy exists, every sample config holds every
key with its default. No container engine or systemd runs here; these files are checked by reading."""

import json
import re
import shlex
import tomllib
from pathlib import Path, PurePosixPath

import pytest
import yaml

from deploy import local_cluster
from nsqadmin import options as nsqadmin_options
from nsqd import options as nsqd_options
from nsqlookupd import options as nsqlookupd_options
from serving.daemon import NOT_OPTIONS

from .helpers import ROOT

DEPLOY = ROOT / "deploy"
CONFIG_DIR = DEPLOY / "config"
CONFIG_INSTALL_DIR = PurePosixPath("/etc/nsq")  # where the image and the systemd units keep deploy/config/
OPTIONS = {"nsqd": nsqd_options, "nsqlookupd": nsqlookupd_options, "nsqadmin": nsqadmin_options}
# What a daemon cannot start without, beyond its defaults (nsqadmin: where the cluster is).
REQUIRED_FLAGS = {"nsqadmin": ["--lookupd-http-address=127.0.0.1:4161"]}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONSOLE_SCRIPTS = set(PYPROJECT["project"]["scripts"])


def daemon_options(argv: list[str]):
    """The options the daemon named by ``argv[0]`` resolves from the rest of ``argv``, config file
    included (at its place in deploy/config/): FlagError for a flag it does not define."""
    program = PurePosixPath(argv[0]).name
    assert program in CONSOLE_SCRIPTS, f"{program} is not a console script in pyproject.toml"
    args = []
    for arg in argv[1:]:
        name, _, value = arg.partition("=")
        if name == "--config":
            assert PurePosixPath(value).parent == CONFIG_INSTALL_DIR, arg
            value = str(CONFIG_DIR / PurePosixPath(value).name)
        args.append(f"{name}={value}" if value else name)
    return OPTIONS[program].load_options(args)


def port_of(address: str) -> int:
    return int(address.rpartition(":")[2])


# Sample config files


def config_lines(text: str) -> list[tuple[str, str]]:
    """(key, the comment line above it) for every key, set or commented out (``# key = ...``)."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        match = re.match(r"(?:# )?(\w+) = ", line)
        if match:
            found.append((match.group(1), lines[i - 1]))
    return found


@pytest.mark.parametrize("program", sorted(OPTIONS))
def test_sample_config_has_every_key_with_its_default(program):
    path = CONFIG_DIR / f"{program}.cfg"
    text = path.read_text()
    flags = [flag for flag in OPTIONS[program].FLAGS if flag.key not in NOT_OPTIONS]
    listed = config_lines(text)
    assert sorted(key for key, _ in listed) == sorted(flag.key for flag in flags)
    assert all(comment.startswith("## ") for _, comment in listed), "every key is explained above it"
    # Keys whose default is this host's (hostname, or a hash of it) are shown commented out.
    commented = set(re.findall(r"^# (\w+) = ", text, re.M))
    assert commented == {flag.key for flag in flags if "hostname" in flag.help}
    assert commented.isdisjoint(tomllib.loads(text))
    required = REQUIRED_FLAGS.get(program, [])
    from_file = OPTIONS[program].load_options([f"--config={path}", *required])
    defaults = OPTIONS[program].load_options(required)
    assert from_file.unknown_config_keys == []
    assert {**vars(from_file), "config": ""} == vars(defaults)



# Dockerfile

DOCKERFILE = DEPLOY / "Dockerfile"


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's build stages, each a list of (INSTRUCTION, arguments), continuations joined."""
    stages: list[list[tuple[str, str]]] = []
    for line in re.sub(r"\\\n", " ", DOCKERFILE.read_text()).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, args = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        stages[-1].append((instruction.upper(), args.strip()))
    return stages


def arguments(stage: list[tuple[str, str]], instruction: str) -> list[str]:
    return [args for name, args in stage if name == instruction]


def image_venv() -> PurePosixPath:
    """The virtualenv the image installs the project into."""
    build_runs = " ".join(arguments(dockerfile_stages()[0], "RUN"))
    return PurePosixPath(re.search(r"python -m venv (\S+)", build_runs).group(1))


def test_the_image_copies_what_exists_and_installs_the_project():
    stages = dockerfile_stages()
    copies = [args.split() for stage in stages for args in arguments(stage, "COPY") if not args.startswith("--")]
    sources = {source.rstrip("/") for *sources, _ in copies for source in sources}
    assert all((ROOT / source).exists() for source in sources), sources
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") + 1:], "the context is the repository: only what is copied goes in"
    assert sources <= {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    packages = {package.split(".")[0] for package in PYPROJECT["tool"]["setuptools"]["packages"]}
    assert packages | {"pyproject.toml", PYPROJECT["project"]["readme"]} <= sources
    venv = image_venv()
    assert any(f"{venv}/bin/pip install" in run and run.endswith(" '.[history]'") for run in arguments(stages[0], "RUN"))
    final = stages[-1]
    assert any(re.fullmatch(rf"--from=\S+ {venv} {venv}", args) for args in arguments(final, "COPY"))
    env = dict(item.split("=", 1) for args in arguments(final, "ENV") for item in shlex.split(args))
    assert env["PATH"].startswith(f"{venv}/bin:")
    assert ["deploy/config/", f"{CONFIG_INSTALL_DIR}/"] in copies


def test_the_image_runs_a_daemon_as_a_non_root_user_on_a_data_volume():
    final = dockerfile_stages()[-1]
    user = arguments(final, "USER")[-1]
    assert user.split(":")[0] not in ("root", "0")
    runs = " ".join(arguments(final, "RUN"))
    assert re.search(rf"\buseradd\b[^&]* {user}\b", runs)
    [volume] = arguments(final, "VOLUME")
    assert arguments(final, "WORKDIR")[-1] == volume  # nsqd's default --data-path is its working directory
    assert re.search(rf"\bchown {user}(:\S+)? {volume}\b", runs)
    command = json.loads(arguments(final, "CMD")[-1])
    daemon_options(command)
    exposed = {int(port) for args in arguments(final, "EXPOSE") for port in args.split()}
    for program, module in OPTIONS.items():
        defaults = module.load_options(REQUIRED_FLAGS.get(program, []))
        for kind in ("tcp_address", "http_address"):
            if hasattr(defaults, kind):
                assert port_of(getattr(defaults, kind)) in exposed, (program, kind)


# docker-compose.yml

COMPOSE = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def make_runs_daemons() -> dict[str, local_cluster.Daemon]:
    """What ``make run`` starts with its default options, by label."""
    ports, data = local_cluster.Ports(), Path("data")
    daemons = [local_cluster.nsqlookupd(ports),
               *(local_cluster.nsqd(n, ports, data, f"127.0.0.1:{ports.lookupd_tcp}") for n in (1, 2)),
               local_cluster.nsqadmin(ports, data, f"127.0.0.1:{ports.lookupd_http}")]
    return {daemon.label: daemon for daemon in daemons}


def listening_ports(daemon: local_cluster.Daemon, opts) -> list[int]:
    return [port_of(getattr(opts, f"{kind.lower()}_address")) for kind in daemon.listeners]


def mounts(service: dict) -> dict[str, str]:
    """Mount target -> named volume."""
    return {target: volume for volume, target in (mount.split(":")[:2] for mount in service.get("volumes", []))}


def test_compose_runs_the_cluster_make_run_runs():
    services, expected = COMPOSE["services"], make_runs_daemons()
    assert list(services) == list(expected) == local_cluster.labels(2)
    for service in services.values():
        assert (DEPLOY / service["build"]["context"]).resolve() == ROOT
        assert (ROOT / service["build"]["dockerfile"]).resolve() == DOCKERFILE
    opts = {name: daemon_options(service["command"]) for name, service in services.items()}
    for name, service in services.items():
        daemon = expected[name]
        assert service["command"][0] == daemon.program
        published = [tuple(map(int, mapping.split(":"))) for mapping in service["ports"]]
        make_run_opts = daemon_options([daemon.program, *daemon.flags])
        assert published == list(zip(listening_ports(daemon, make_run_opts), listening_ports(daemon, opts[name])))

    lookupd = opts["nsqlookupd"]
    nsqds = [name for name in services if services[name]["command"][0] == "nsqd"]
    for name in nsqds:
        assert opts[name].lookupd_tcp_address == [f"nsqlookupd:{port_of(lookupd.tcp_address)}"]
        assert opts[name].broadcast_address == name  # what nsqadmin and clients on the network resolve
    assert opts["nsqadmin"].lookupd_http_address == [f"nsqlookupd:{port_of(lookupd.http_address)}"]
    assert {"nsqlookupd"} | set(nsqds) >= set(services["nsqadmin"]["depends_on"]) >= {"nsqlookupd"}


def test_compose_gives_each_nsqd_and_nsqadmin_a_data_volume_of_its_own():
    services = COMPOSE["services"]
    [image_volume] = arguments(dockerfile_stages()[-1], "VOLUME")
    kept = {"nsqd-1": "data_path", "nsqd-2": "data_path", "nsqadmin": "stats_dir"}
    volumes = []
    for name, option in kept.items():
        where = PurePosixPath(getattr(daemon_options(services[name]["command"]), option))
        [(target, volume)] = mounts(services[name]).items()
        assert target == image_volume and where.is_relative_to(target), (name, where)
        volumes.append(volume)
    assert len(set(volumes)) == len(volumes)
    assert set(volumes) == set(COMPOSE["volumes"])


# systemd units


def unit_file(path: Path) -> dict[str, dict[str, str]]:
    """Sections of key=value, continuation lines joined."""
    sections: dict[str, dict[str, str]] = {}
    for line in path.read_text().replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
        else:
            key, _, value = line.partition("=")
            section[key.strip()] = value.strip()
    return sections


def test_systemd_units_run_each_daemon_from_the_images_layout():
    units = {path.stem: unit_file(path) for path in (DEPLOY / "systemd").glob("*.service")}
    assert sorted(units) == sorted(OPTIONS)
    for name, unit in units.items():
        service = unit["Service"]
        argv = shlex.split(service["ExecStart"])
        assert argv[0] == f"{image_venv()}/bin/{name}"
        assert any(arg.startswith("--config=") for arg in argv)
        opts = daemon_options(argv)
        assert service["User"] not in ("root", "0")
        written = {"nsqd": "data_path", "nsqadmin": "stats_dir"}.get(name)
        if written:
            assert PurePosixPath(getattr(opts, written)).is_relative_to(f"/var/lib/{service['StateDirectory']}")
        for after in unit["Unit"].get("After", "").split():
            assert not after.endswith(".service") or after.removesuffix(".service") in units
        assert unit["Install"]["WantedBy"] == "multi-user.target"
