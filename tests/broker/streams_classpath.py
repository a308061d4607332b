"""The class path of Kafka Streams 4.4 (org.apache.kafka:kafka-streams from Maven Central, with
log4j2 behind slf4j), resolved once with Maven and cached (``headrace.broker.tools.maven``)."""

from __future__ import annotations

from headrace.broker.tools.maven import pom_classpath

STREAMS_VERSION = "4.4.0"
POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.headrace.tests</groupId>
  <artifactId>kafka-streams-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-streams</artifactId>
      <version>{STREAMS_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>2.24.3</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
"""


def classpath() -> str:
    return pom_classpath(f"kafka-streams-{STREAMS_VERSION}", POM)


if __name__ == "__main__":
    print(classpath())
