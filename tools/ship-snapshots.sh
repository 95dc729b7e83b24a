#!/bin/sh
# tools/ship-snapshots.sh DIR REMOTE - ships an ah-snapshot DIR with rclone.
#
# Objects first (immutable: copy), then manifests (sync: pruned ones go),
# then objects again (sync: objects no manifest names any more go), so the
# remote never holds a manifest whose objects are not all there, even when
# a step is cut short.  DIR/tmp and DIR/lock are never shipped.
# It must never delete a remote object before the manifests that name it.
set -eu
[ $# -eq 2 ] || { echo "usage: ship-snapshots.sh DIR REMOTE" >&2; exit 2; }
rclone copy "$1/objects" "$2/objects"
rclone sync "$1/manifests" "$2/manifests"
rclone sync "$1/objects" "$2/objects"
