# call A (thirty-third session, for an H200 only: on another GPU it stops at once): the thirty-second session's
# call C script as it stands (docs/results/2026-12-07-h100-s32/eC.sh: the default build graph-timed, exactness,
# profile at M=2 / 8, TP4 M=1/2/4/8 in three rounds, TP1 M=1/2; the peers' first wheels installed under /tmp),
# its logs in $OUT/eC. Call B (eB.sh) then runs the peers on the same machine.
bash "$(dirname "$0")/../2026-12-07-h100-s32/eC.sh"
