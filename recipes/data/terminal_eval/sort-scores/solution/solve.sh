#!/bin/bash
sort -t, -k2 -nr data/scores.csv | head -n 3 | cut -d, -f1 > out/top3.txt
