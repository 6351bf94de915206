"""Running the daemons: ``make run``'s local cluster, and the files for containers and systemd."""
