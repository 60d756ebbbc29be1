"""mptlab: reproducible multipath experiments for mpt in network namespaces.

Modules:
    util     -- running commands, waiting on state with timeouts
    netns    -- namespaces joined by N shaped links, always torn down
    daemon   -- writing mpt configurations, starting and stopping daemons
    traffic  -- iperf3 and ping wrappers that return parsed results
"""

__all__ = ["util", "netns", "daemon", "traffic"]
