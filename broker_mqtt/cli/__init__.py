"""The ``broker-mqtt`` command line (the top layer): :mod:`.main` is the group, one module per command
family (:mod:`.pubsub`, :mod:`.store`, :mod:`.queue`, :mod:`.status`, :mod:`.node`, :mod:`.demo`,
:mod:`.bench`); :mod:`.common` holds what they share. The entry point is ``broker_mqtt.cli.main:main``."""
