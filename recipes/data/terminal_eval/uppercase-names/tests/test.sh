#!/bin/bash
# Reward 1 when /app/upper.txt holds /app/names.txt's names in upper case, in order, else 0.
mkdir -p /logs/verifier
if [ "$(cat /app/upper.txt 2>/dev/null)" = "$(printf 'NIKLAUS\nHEDY\nALAN\nKATHERINE\nJOHN')" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
