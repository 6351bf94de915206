"""NSQ v1.3's command-line utilities on the nsqclient library, with NSQ's names, flags
(Go's flag syntax) and output formats: ``to_nsq``, ``nsq_tail``, ``nsq_stat``,
``nsq_to_file``, ``nsq_to_http`` and ``nsq_to_nsq``, each a module with a ``main``."""
