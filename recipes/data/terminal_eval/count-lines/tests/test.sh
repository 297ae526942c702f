#!/bin/bash
# Reward 1 when /app/count.txt holds the line count of /app/visitors.txt (11), else 0.
mkdir -p /logs/verifier
if [ "$(tr -d ' \n' < /app/count.txt 2>/dev/null)" = "11" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
