#!/usr/bin/env bash
# Example mptlab hook: a VXLAN tunnel over link 1 (any other tunnel can be
# put beside mpt the same way). Prints the tunnel's MTU and the address to
# send to.
set -euo pipefail
ip netns exec "$MPTLAB_NS_A" ip link add hookt type vxlan id 42 local "$MPTLAB_LINK1_A" remote "$MPTLAB_LINK1_B" dstport 4789 dev l1a
ip netns exec "$MPTLAB_NS_B" ip link add hookt type vxlan id 42 local "$MPTLAB_LINK1_B" remote "$MPTLAB_LINK1_A" dstport 4789 dev l1b
ip netns exec "$MPTLAB_NS_A" ip addr add 10.98.0.1/24 dev hookt
ip netns exec "$MPTLAB_NS_B" ip addr add 10.98.0.2/24 dev hookt
ip netns exec "$MPTLAB_NS_A" ip link set hookt up
ip netns exec "$MPTLAB_NS_B" ip link set hookt up
# What the lab told us (the hook test reads it back).
if [ -n "${MPTLAB_HOOK_ENV_FILE:-}" ]; then env | grep '^MPTLAB_' > "$MPTLAB_HOOK_ENV_FILE"; fi
# The tunnel's MTU, so that the lab sizes UDP datagrams to it.
echo "mtu=$(ip netns exec "$MPTLAB_NS_A" cat /sys/class/net/hookt/mtu)"
echo 10.98.0.2
