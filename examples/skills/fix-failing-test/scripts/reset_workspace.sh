#!/bin/sh
# A helper the skill's author keeps for themselves. It is not declared in toolgate.yaml, so it
# never becomes a tool and never runs through toolgate.
git checkout -- . && git clean -fdx
