#!/usr/bin/env bash
# Example mptlab hook: remove the VXLAN tunnel of vxlan-up.sh.
ip netns exec "$MPTLAB_NS_A" ip link del hookt 2>/dev/null
ip netns exec "$MPTLAB_NS_B" ip link del hookt 2>/dev/null
exit 0
