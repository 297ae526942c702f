#!/bin/bash
wc -l < visitors.txt > count.txt
