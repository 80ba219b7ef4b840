#!/usr/bin/env python3
"""Build a container image tarball (docker-archive, as `ctr images import` reads it) from a
Containerfile and this machine's files, for the test node: no registry is reachable here and no
container engine runs.

What the image holds and how it runs are read from the Containerfile's last stage, so the image
the tests run is the one users build: its USER, ENTRYPOINT and WORKDIR; every file of each
Debian package its `apt-get install` names and of every package those depend on, as apt installs
them (from this machine's dpkg database: the machine is Debian bookworm, the Containerfiles'
base); each `COPY --from=build /src/target/release/X DEST`
taken from --target (the workspace's build output) and each plain `COPY SRC DEST` from
--context. Every ELF file comes with the shared libraries it loads (`ldd`), at the same paths.

    image.py --tag toolgate.test/executor:dev --containerfile executor/Containerfile \
        --target "$CARGO_TARGET_DIR/debug" --out executor.tar

The tar is reproducible: sorted entries, owner root, mtime 0. It prints the image's config
(JSON) and what it took from the Containerfile.
"""

import argparse
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def fail(msg):
    print(f"image.py: {msg}", file=sys.stderr)
    sys.exit(2)


def containerfile_config(path):
    """USER, ENTRYPOINT and WORKDIR of the Containerfile's last stage, the packages it installs
    and what it copies: (config, packages, copies)."""
    config, packages, copies = {}, [], []
    with open(path, encoding="utf-8") as f:
        lines = [l for l in f.read().splitlines() if not l.strip().startswith("#")]
    lines = "\n".join(lines).replace("\\\n", " ").splitlines()
    for line in lines:
        words = line.strip().split(None, 1)
        if not words:
            continue
        op, rest = words[0].upper(), (words[1] if len(words) > 1 else "")
        if op == "FROM":
            config, packages, copies = {}, [], []
        elif op == "RUN":
            for command in rest.split("&&"):
                argv = shlex.split(command)
                if len(argv) > 1 and argv[0] == "apt-get" and "install" in argv:
                    after = argv[argv.index("install") + 1 :]
                    packages += [a for a in after if not a.startswith("-")]
        elif op == "COPY":
            argv = shlex.split(rest)
            source = [a for a in argv if a.startswith("--from=")]
            argv = [a for a in argv if not a.startswith("--")]
            copies.append((source[0][len("--from="):] if source else None, argv[0], argv[1]))
        elif op == "USER":
            config["User"] = rest.strip()
        elif op == "WORKDIR":
            config["WorkingDir"] = rest.strip()
        elif op == "ENTRYPOINT":
            rest = rest.strip()
            config["Entrypoint"] = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    for key in ("User", "Entrypoint"):
        if key not in config:
            fail(f"{path}: its last stage has no {key.upper()}")
    return config, packages, copies


def host_path(path):
    """Where a file of this machine lies once its folders' links are followed (Debian's merged
    /usr: /bin/cat is /usr/bin/cat); the image has the same links (USR_MERGE)."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


USR_MERGE = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"]

# Files a package's maintainer scripts make when it is installed (not in `dpkg -L`), as this
# machine's installation made them.
GENERATED = {"ca-certificates": ["/etc/ssl/certs"]}


def package_files(package):
    """The regular files a Debian package installed on this machine, documentation aside."""
    out = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"the Containerfile installs {package}, which this machine lacks: apt-get install {package}")
    files = []
    for path in out.stdout.splitlines():
        if path.startswith(("/usr/share/doc", "/usr/share/man", "/usr/share/info", "/usr/share/lintian")):
            continue
        if os.path.isfile(path):
            files.append((path, host_path(path)))
    for folder in GENERATED.get(package, []):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                files.append((path, host_path(path)))
    return files


def installed(package):
    """Whether a package (an architecture qualifier aside) is installed here."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", package.split(":")[0]],
                         capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.strip() == "installed"


def with_dependencies(packages):
    """The packages and every installed package they depend on (Depends and Pre-Depends, of
    alternatives the first installed one), as `apt-get install` would have put them in the image;
    a virtual package is whatever already provides it."""
    todo, closure = list(packages), []
    while todo:
        package = todo.pop().split(":")[0]
        if package in closure:
            continue
        if not installed(package):
            fail(f"package {package}: not installed on this machine: apt-get install {package}")
        closure.append(package)
        out = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", package],
                             capture_output=True, text=True, check=True)
        for clause in out.stdout.split(","):
            names = [alt.split()[0] for alt in clause.split("|") if alt.strip()]
            chosen = next((n for n in names if installed(n)), None)
            if chosen and chosen.split(":")[0] not in closure:
                todo.append(chosen)
    return sorted(closure)


def tree_files(src, dest):
    """(source, destination) of every file and link below the folder `src`, placed below `dest`."""
    files = []
    for root, dirs, names in os.walk(src):
        dirs.sort()
        for name in sorted(names) + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            if os.path.isfile(path) or os.path.islink(path):
                files.append((path, os.path.join(dest, os.path.relpath(path, src))))
    return files


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def libraries(path):
    """The shared libraries an ELF file loads, as absolute paths on this machine."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    if out.returncode != 0:
        return []  # static, or not a dynamic executable
    libs = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts:
            i = parts.index("=>")
            if i + 1 < len(parts) and parts[i + 1].startswith("/"):
                libs.append(parts[i + 1])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])  # the dynamic loader
    return libs


def add_file(tar, src, dest, seen, links):
    """One file: a symbolic link stays one (a package's own links), a second name of the same
    file is a hard link to the first (git's many commands are one program)."""
    dest = dest.lstrip("/")
    if dest in seen:
        return
    seen.add(dest)
    if "/" in dest:
        add_dir(tar, dest.rsplit("/", 1)[0], seen)
    info = tarfile.TarInfo(dest)
    info.uid = info.gid = 0
    info.mtime = 0
    if os.path.islink(src) and os.path.basename(src) == os.path.basename(dest):
        info.type = tarfile.SYMTYPE
        info.linkname = os.readlink(src)
        info.mode = 0o777
        tar.addfile(info)
        return
    st = os.stat(src)
    info.mode = st.st_mode & 0o7777
    first = links.setdefault((st.st_dev, st.st_ino), dest)
    if first != dest:
        info.type = tarfile.LNKTYPE
        info.linkname = first
        tar.addfile(info)
        return
    info.size = st.st_size
    with open(src, "rb") as f:
        tar.addfile(info, f)


def add_dir(tar, dest, seen, mode=0o755):
    dest = dest.strip("/")
    if not dest or dest in seen:
        return
    if "/" in dest:
        add_dir(tar, dest.rsplit("/", 1)[0], seen)
    seen.add(dest)
    info = tarfile.TarInfo(dest)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.mtime = 0
    tar.addfile(info)


def add_bytes(tar, dest, data, seen, mode=0o644):
    dest = dest.lstrip("/")
    if "/" in dest:
        add_dir(tar, dest.rsplit("/", 1)[0], seen)
    seen.add(dest)
    info = tarfile.TarInfo(dest)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    tar.addfile(info, io.BytesIO(data))


def layer(files, dirs, user):
    """The image's one layer: the files with their libraries, the folders, a passwd naming the
    image's user."""
    entries = {}
    for src, dest in files:
        if not os.path.isfile(src) and not os.path.islink(src):
            fail(f"--file {src}:{dest}: {src} is not a file")
        entries[dest] = src
        if os.path.isfile(src) and is_elf(src):
            for lib in libraries(src):
                entries.setdefault(host_path(lib), lib)
    # A link's target comes too (libfoo.so.1 is a link to libfoo.so.1.2.3).
    for src in list(entries.values()):
        if os.path.islink(src) and os.path.isfile(os.path.realpath(src)):
            entries.setdefault(os.path.realpath(src), os.path.realpath(src))
    uid = user.split(":")[0]
    gid = user.split(":")[1] if ":" in user else uid
    passwd = f"root:x:0:0:root:/root:/usr/sbin/nologin\nnonroot:x:{uid}:{gid}:nonroot:/home/nonroot:/usr/sbin/nologin\n"
    group = f"root:x:0:\nnonroot:x:{gid}:\n"
    buf = io.BytesIO()
    seen, links = set(), {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(set(dirs) | {"tmp", "proc", "sys", "dev", "etc", "home/nonroot"}):
            add_dir(tar, d, seen, 0o1777 if d.strip("/") == "tmp" else 0o755)
        for link in USR_MERGE:
            if os.path.islink("/" + link):
                info = tarfile.TarInfo(link)
                info.type = tarfile.SYMTYPE
                info.linkname = os.readlink("/" + link)
                info.mtime = 0
                tar.addfile(info)
                seen.add(link)
        add_bytes(tar, "etc/passwd", passwd.encode(), seen)
        add_bytes(tar, "etc/group", group.encode(), seen)
        for dest in sorted(entries):
            add_file(tar, entries[dest], dest, seen, links)
    return buf.getvalue()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tag", required=True)
    p.add_argument("--containerfile", required=True)
    p.add_argument("--target", help="the build output standing for /src/target/release/")
    p.add_argument("--context", help="the folder plain COPY sources are read from")
    p.add_argument("--add", action="append", default=[],
                   help="SRC:DEST, a file or folder a test adds to the Containerfile's image")
    p.add_argument("--package", action="append", default=[],
                   help="a Debian package a test adds, with the packages it depends on")
    p.add_argument("--out", required=True)
    a = p.parse_args()

    config, named, copies = containerfile_config(a.containerfile)
    packages = with_dependencies(named) if named else []
    files = []
    for package in packages:
        files += package_files(package)
    for stage, src, dest in copies:
        if stage is not None:
            prefix = "/src/target/release/"
            if not src.startswith(prefix) or not a.target:
                fail(f"{a.containerfile}: COPY --from={stage} {src}: only build outputs under {prefix} are known (pass --target)")
            src = os.path.join(a.target, src[len(prefix):])
        else:
            if not a.context:
                fail(f"{a.containerfile}: COPY {src}: pass --context")
            src = os.path.join(a.context, src)
        if dest.endswith("/"):
            dest += os.path.basename(src)
        files.append((src, dest))
    added = with_dependencies(a.package) if a.package else []
    for package in added:
        if package not in packages:
            files += package_files(package)
    for spec in a.add:
        if ":" not in spec:
            fail(f"--add {spec}: expected SRC:DEST")
        src, dest = spec.split(":", 1)
        files += tree_files(src, dest) if os.path.isdir(src) else [(src, dest)]
    dirs = []
    if config.get("WorkingDir"):
        dirs.append(config["WorkingDir"])

    tar_bytes = layer(files, dirs, config["User"])
    diff_id = "sha256:" + hashlib.sha256(tar_bytes).hexdigest()
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": dict(config, Env=[f"PATH={PATH}"]),
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"tests/cluster/node/image.py from {a.containerfile}"}],
    }
    config_bytes = json.dumps(image_config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [a.tag], "Layers": [layer_name]}]
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, mode="w") as out:
        for name, data in (
            (layer_name, tar_bytes),
            (config_name, config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            out.addfile(info, io.BytesIO(data))
    os.replace(tmp, a.out)
    print(json.dumps({"tag": a.tag, "config": image_config["config"], "packages": packages + added,
                      "copies": [[src, dest] for _, src, dest in copies], "diff_id": diff_id}))


if __name__ == "__main__":
    main()
