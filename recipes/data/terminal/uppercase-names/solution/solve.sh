#!/bin/bash
tr a-z A-Z < names.txt > upper.txt
