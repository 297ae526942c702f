#!/bin/bash
echo "Helo, wrold!"
