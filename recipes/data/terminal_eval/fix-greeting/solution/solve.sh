#!/bin/bash
sed -i 's/Helo, wrold!/Hello, world!/' greet.sh
