"""The tools around the proxy (a package beside `proxy`, which never imports it): the `vcproxy` command and its
subcommands other than `serve` (command-line clients of the management, ACL, quota, state and user RPCs,
probe, demo, traces job, bench) and the Kafka launcher the tests and the demo use."""
