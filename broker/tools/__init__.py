"""headrace.broker.tools: the admin commands of ``headrace`` and the processes tests and tools
start (a broker, ZooKeeper).

topics_command.py    ``headrace topics list|describe|create|delete|alter`` against a running
                     broker or cluster
groups_command.py    ``headrace groups list|describe|reset-offsets|delete`` against a running
                     broker or cluster
dump_log_command.py  ``headrace dump-log FILE|DIR [--print-data]``: what a segment holds, as
                     Kafka's ``kafka-dump-log`` shows it
verify_command.py    ``headrace verify DIR``: check every segment of a data directory (or of one
                     partition)
command_output.py    Output of the admin commands: aligned tables for a person, JSON for scripts
                     (``--json``)
process.py           A Headrace broker in a child process, for tests and tools that need a real
                     Kafka endpoint
zookeeper_server.py  A standalone Apache ZooKeeper server, run the way its users run it: jars
                     from Maven Central
maven.py             Java class paths from Maven Central, resolved once with Maven and cached
"""
