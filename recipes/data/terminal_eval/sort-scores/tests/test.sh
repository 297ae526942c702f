#!/bin/bash
# Partial credit: reward.json holds the share of the three names in their right place.
mkdir -p /logs/verifier
expected=(pia lena quinn)
mapfile -t got < /app/out/top3.txt 2>/dev/null
right=0
for i in 0 1 2; do
  if [ "${got[$i]:-}" = "${expected[$i]}" ]; then right=$((right + 1)); fi
done
shares=(0 0.3333 0.6667 1)
printf '{"reward": %s}\n' "${shares[$right]}" > /logs/verifier/reward.json
