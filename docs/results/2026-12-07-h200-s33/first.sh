# the session's first call on whichever GPU comes: on an H200 call A (its figures, the hardware), on any
# other GPU call C (the experiment)
d=$(dirname "$0")
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then bash $d/eA.sh; else bash $d/eC.sh; fi
