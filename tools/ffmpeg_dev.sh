#!/usr/bin/env bash
# FFmpeg's development files, which the build needs for fastloader._video (csrc/video/: video
# windows decoded by libav* with the GIL released). Where pkg-config already finds them,
# nothing to do; else, as root with apt-get (Debian/Ubuntu), they are installed; else a warning,
# and the build leaves the module out (video then decodes through PyAV's bundled FFmpeg).
set -uo pipefail
PACKAGES="pkg-config libavformat-dev libavcodec-dev libswscale-dev libavutil-dev"
if pkg-config --exists libavformat libavcodec libswscale libavutil 2>/dev/null; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086  # the package list splits on purpose
    if apt-get install -y -q --no-install-recommends $PACKAGES >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $PACKAGES >/dev/null; }; then
        exit 0
    fi
fi
echo "WARNING: FFmpeg's development files (Debian/Ubuntu: apt-get install $PACKAGES) are" \
     "missing and could not be installed: fastloader._video is not built, and video decodes" \
     "through PyAV (slower); its tests will be SKIPPED" >&2
exit 0
