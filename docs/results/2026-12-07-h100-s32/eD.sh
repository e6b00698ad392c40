# call D (thirty-second session, right after C on the same H200): call B's script as it ran on the H100, the peers in
# the same run as the cluster cycle; the default build is now the one call B ran by DECODER_SHELL_CUDA_DEFINES
# (CL_SV_LANE2=4), so no define is needed. Its logs land in $OUT/eB.
bash "$(dirname "$0")/eB.sh"
