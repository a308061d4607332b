"""The fault suite: Headrace and Apache Kafka through the same faults on a simulated network.

    python -m bench.faults --help

net.py        hosts in network namespaces on a bridge; cuts, loss and delay between them
delayer.py    the NFQUEUE delayer net.py runs for delayed links (a process of its own)
systems.py    ZooKeeper + 3 brokers of Headrace or of Kafka 3.9 (ZooKeeper mode), placed on hosts
workload.py   the clients (a process of their own): checked load, Metadata probe, read-back
checker.py    what the clients were told against what the topic holds; gaps, rates
scenarios.py  one system through rounds of one fault mode: the runner
__main__.py   the command line: modes x systems, the table, the plot

arrows: __main__ -> scenarios -> (net, systems, checker); workload runs apart; net -> delayer
"""
