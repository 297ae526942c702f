#!/bin/bash
# Reward 1 when the fixed script prints exactly "Hello, world!", else 0.
mkdir -p /logs/verifier
if [ "$(bash /app/greet.sh 2>/dev/null)" = "Hello, world!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
