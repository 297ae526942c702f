#!/bin/bash
# Greets whoever runs it.
echo "Helo, wrold!"
exit 0
