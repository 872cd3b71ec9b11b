"""The fleet: an online session across machines, over MQTT (docs/fleet.md).

The learner (``agent learner``) and any number of actors (``agent actor``, one device each, on any machine) run the
same code as an in-process session (``agent.online``); only the transport differs. Modules, in reading order:

- ``settings``: the broker's address (``mqtt://`` / ``mqtts://`` URLs), credentials, the session's topics;
- ``keys``: the fleet key, and signing and checking version announcements (HMAC-SHA256);
- ``spool``: an actor's disk spool, where every outgoing message waits for the broker's acknowledgement;
- ``inbox``: what the learner accepts from the bus (size, schema, topic, known actors) and what it refuses;
- ``journal``: the learner's inbox log, where every sample message is fsynced before it is acknowledged;
- ``mqtt``: ``MqttTransport``, the ``train.transport.Transport`` over aiomqtt (actor, learner and observer roles);
- ``versions``: the learner's HTTP server for adapter versions, and the actors' fetch and check;
- ``served``: actors whose policy is a vLLM server (runtime LoRA loading, requests by version name);
- ``actor``: one actor process (``FleetActor``); ``status``: ``agent fleet status``; ``record``: the learner's
  ``fleet.json`` across restarts and its own retained status.

aiomqtt is imported only where a connection is made, so ``agent --help`` stays light.
"""

from agent.fleet.settings import BrokerConfig, Topics, parse_broker

__all__ = ["BrokerConfig", "Topics", "parse_broker"]
