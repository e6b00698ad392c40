# call B (thirty-third session, right after A on the same H200): the thirty-second session's call B script (the
# peers in the same run as the cluster cycle, then the draft + verify replay), its logs in $OUT/eB.
grep -q H200 <(nvidia-smi --query-gpu=name --format=csv,noheader) || { echo "not an H200: stopped"; exit 0; }
bash "$(dirname "$0")/../2026-12-07-h100-s32/eB.sh"
