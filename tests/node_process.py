"""A node in its own process for tests: ``node_process.py URL NAMESPACE ID [echo]``.

Prints READY once connected (and subscribed to /echo when asked), then serves until killed
or SIGTERM (a clean leave). With ``echo`` it republishes everything on /echo/in to /echo/out.
"""

import signal
import sys
import uuid

import anyio

from broker_mqtt import Endpoint


async def main() -> None:
    url, namespace, node_id, *flags = sys.argv[1:]
    async with Endpoint(url, namespace=namespace, id=uuid.UUID(node_id), name=f"proc-{node_id[:4]}") as ep:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            if "echo" in flags:
                async with ep.subscribe("/echo/in") as sub:
                    print("READY", flush=True)
                    async with anyio.create_task_group() as tg:

                        async def echo() -> None:
                            async for msg in sub:
                                await ep.publish("/echo/out", msg.data)

                        tg.start_soon(echo)
                        async for _ in signals:
                            tg.cancel_scope.cancel()
                            break
            else:
                print("READY", flush=True)
                async for _ in signals:
                    break


anyio.run(main)
