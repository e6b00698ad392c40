#!/usr/bin/env bash
# Nsight Compute on one launch of the cluster cycle (dsv4-flash TP4 verify, tools/cluster_ncu.py) for each M in
# ROWS (default 2): warp state and source counters, the details page as text and the per-SASS-instruction stall
# samples as CSV, under $OUT/m<M>/.   [ROWS="2 8"] bash tools/gpu_cluster_ncu.sh
OUT=${OUT:-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for M in ${ROWS:-2}; do
  O=$OUT/m$M; mkdir -p "$O"
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 240 $NCU --clock-control none --section WarpStateStats --section SourceCounters \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy -k regex:cluster_q \
    --launch-skip 2 --launch-count 1 -o "$O/cl" python3 tools/cluster_ncu.py --rows "$M" > "$O/ncu.log" 2>&1
  echo "M=$M ncu rc=$?"; tail -5 "$O/ncu.log"
  $NCU -i "$O/cl.ncu-rep" --page details > "$O/details.txt" 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Registers Per" "$O/details.txt" | head -8
  $NCU -i "$O/cl.ncu-rep" --page source --csv --print-source sass > "$O/sass.csv" 2>&1; wc -c "$O/sass.csv"; gzip "$O/sass.csv"
  rm -f "$O/cl.ncu-rep"
done
