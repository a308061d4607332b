"""headrace.broker.app: the broker process: wiring, start-up, request dispatch, shutdown; the
``headrace`` command; the in-process broker; the metrics endpoint.

server.py             The broker process: how the pieces are wired, start-up, clean shutdown
data_dir.py           The data directory as a whole: its lock, ``meta.properties`` (the cluster
                      id), the clean-shutdown marker
dispatch.py           The pipeline's handler: a request decoded, its API module called, the
                      answer encoded (or the connection closed)
embedded.py           ``headrace.Broker``: a broker inside the calling process, for the fastest
                      tests
cli.py                The ``headrace`` command
workers.py            ``headrace serve --workers N``: N brokers of one cluster on this machine,
                      one per core
metrics.py            The broker's Prometheus metrics: what is counted on the request path, what
                      is read at scrape
metrics_collector.py  What Prometheus reads at scrape time: ``BrokerCollector`` (metrics.py says
                      what is counted on the request path; metrics_http.py serves it)
metrics_http.py       The HTTP endpoint of ``metrics.port``: ``/metrics`` (Prometheus),
                      ``/health``, ``/ready``
"""
