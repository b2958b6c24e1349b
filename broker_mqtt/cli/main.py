"""The ``broker-mqtt`` command line: the group and its commands.

Exit codes: 0 success; 1 the command ran but its check failed (e.g. the demo did not see what it
expected); 2 usage errors (click's own); 3 the broker is unreachable or refused us.
"""

from __future__ import annotations

import click

from .._version import __version__
from .acl import acl
from .bench import bench
from .demo import demo, demo_node, demo_spark
from .keys import keys
from .node import node
from .pubsub import pub, sub
from .queue import queue
from .status import status
from .store import peers, store


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="broker-mqtt")
def main() -> None:
    """Zeek Broker's model over MQTT 5: endpoints, topics, peers."""


for _command in (pub, sub, peers, status, store, queue, node, demo, demo_node, demo_spark, bench, keys, acl):
    main.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    main()
