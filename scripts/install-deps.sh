#!/usr/bin/env bash
# What toolgate needs from the system besides Rust: bubblewrap, the sandbox every local call runs
# in. Installs it with apt when missing (as root, or through sudo); does nothing when present.
set -euo pipefail
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: bubblewrap (bwrap) is missing and there is no apt-get; install bubblewrap with your package manager" >&2
  exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: bubblewrap is missing; run as root: apt-get install bubblewrap" >&2
    exit 1
  fi
fi
echo "install-deps: installing bubblewrap (apt)" >&2
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq bubblewrap >/dev/null
command -v bwrap >/dev/null
