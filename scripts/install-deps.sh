#!/usr/bin/env bash
# What toolgate needs from the system besides Rust: bubblewrap, the sandbox every local call runs
# in, and (as root) e2fsprogs and mount, which make the filesystem a call's writes land on (its
# write quota). Installs what is missing with apt (as root, or through sudo); does nothing when
# everything is present.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
command -v mount >/dev/null 2>&1 || missing+=(mount)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: ${missing[*]} missing and there is no apt-get; install them with your package manager" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: ${missing[*]} missing; run as root: apt-get install ${missing[*]}" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]} (apt)" >&2
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
command -v bwrap >/dev/null && command -v mkfs.ext4 >/dev/null && command -v mount >/dev/null
