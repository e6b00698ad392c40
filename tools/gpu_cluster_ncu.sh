#!/usr/bin/env bash
# Nsight Compute on one launch of the cluster cycle (dsv4-flash TP4 verify M=2, tools/cluster_ncu.py): warp state and
# source counters, the details page as text and the per-SASS-instruction stall samples as CSV, under $OUT.
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
PYTHONPATH=$PWD:$PYTHONPATH timeout 240 $NCU --clock-control none --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy -k regex:cluster_q --launch-skip 2 --launch-count 1 -o $OUT/cl python3 tools/cluster_ncu.py > $OUT/ncu.log 2>&1; echo "ncu rc=$?"; tail -5 $OUT/ncu.log
$NCU -i $OUT/cl.ncu-rep --page details > $OUT/details.txt 2>&1; head -c 6000 $OUT/details.txt | grep -v "^ *-" | head -80
$NCU -i $OUT/cl.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1; wc -c $OUT/sass.csv; gzip $OUT/sass.csv
