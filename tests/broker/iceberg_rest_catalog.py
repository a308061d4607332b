"""A real Iceberg REST catalog for the tests: Apache Iceberg's own REST test fixture,
``org.apache.iceberg.rest.RESTCatalogServer`` (the server of Iceberg's REST compatibility kit
and of its apache/iceberg-rest-fixture image), run unchanged from Maven Central's
``iceberg-open-api`` 1.10.0 ``test-fixtures`` jar.

The server is Jetty serving Iceberg's ``RESTCatalogAdapter`` (iceberg-core's ``tests`` jar) in
front of a ``JdbcCatalog``, configured by ``CATALOG_*`` environment variables (``CATALOG_URI``
-> the catalog property ``uri``, ``CATALOG_IO__IMPL`` -> ``io-impl``: ``__`` becomes ``-``,
``_`` becomes ``.``). Here the JDBC catalog is a SQLite file (sqlite-jdbc), so the tables
survive a restart of the server, and its FileIO is iceberg-core's ``TestTables$LocalFileIO``
(``java.io.File``), which reads and writes the metadata files as plain local paths, the paths
pyiceberg (in the broker, and in the test) writes the data files and manifests beside: no
Hadoop FileSystem is involved. The fixture still makes a Hadoop ``Configuration`` (handed to
the catalog, never read), so hadoop-common is on the class path without its dependencies, with
the few that class loads.

The class path is resolved once with Maven and cached (``headrace.broker.tools.maven``): the
first run downloads some 40 MB from Maven Central (a third of it sqlite-jdbc with its native
libraries); later runs start the JVM at once, without Maven. The server binds every interface
(the fixture takes a port, not an address), on a free port picked here; the tests reach it on
127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from headrace.broker.tools.maven import pom_classpath

ICEBERG_VERSION = "1.10.0"
MAIN = "org.apache.iceberg.rest.RESTCatalogServer"
LOCAL_FILE_IO = "org.apache.iceberg.TestTables$LocalFileIO"
# the versions Iceberg 1.10.0 builds the fixture with (gradle/libs.versions.toml)
POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.headrace.tests</groupId>
  <artifactId>iceberg-rest-fixture-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.iceberg</groupId>
      <artifactId>iceberg-open-api</artifactId>
      <version>{ICEBERG_VERSION}</version>
      <classifier>test-fixtures</classifier>
    </dependency>
    <dependency>
      <groupId>org.apache.iceberg</groupId>
      <artifactId>iceberg-core</artifactId>
      <version>{ICEBERG_VERSION}</version>
    </dependency>
    <!-- RESTCatalogAdapter, RESTCatalogServlet and TestTables$LocalFileIO -->
    <dependency>
      <groupId>org.apache.iceberg</groupId>
      <artifactId>iceberg-core</artifactId>
      <version>{ICEBERG_VERSION}</version>
      <classifier>tests</classifier>
    </dependency>
    <dependency>
      <groupId>org.eclipse.jetty</groupId>
      <artifactId>jetty-servlet</artifactId>
      <version>11.0.26</version>
    </dependency>
    <dependency>
      <groupId>org.eclipse.jetty</groupId>
      <artifactId>jetty-server</artifactId>
      <version>11.0.26</version>
    </dependency>
    <dependency>
      <groupId>org.xerial</groupId>
      <artifactId>sqlite-jdbc</artifactId>
      <version>3.50.3.0</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>2.0.17</version>
    </dependency>
    <!-- org.apache.hadoop.conf.Configuration, which the fixture makes, and what it loads -->
    <dependency>
      <groupId>org.apache.hadoop</groupId>
      <artifactId>hadoop-common</artifactId>
      <version>3.4.1</version>
      <exclusions>
        <exclusion>
          <groupId>*</groupId>
          <artifactId>*</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.hadoop.thirdparty</groupId>
      <artifactId>hadoop-shaded-guava</artifactId>
      <version>1.3.0</version>
    </dependency>
    <dependency>
      <groupId>com.fasterxml.woodstox</groupId>
      <artifactId>woodstox-core</artifactId>
      <version>5.4.0</version>
    </dependency>
    <dependency>
      <groupId>org.apache.commons</groupId>
      <artifactId>commons-lang3</artifactId>
      <version>3.12.0</version>
    </dependency>
    <dependency>
      <groupId>commons-collections</groupId>
      <artifactId>commons-collections</artifactId>
      <version>3.2.2</version>
    </dependency>
  </dependencies>
</project>
"""


def classpath() -> str:
    """The fixture's class path (resolved with Maven the first time, then cached)."""
    return pom_classpath(f"iceberg-rest-fixture-{ICEBERG_VERSION}", POM)


def available() -> bool:
    return shutil.which("java") is not None and shutil.which("mvn") is not None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


class RestCatalogServer:
    """Iceberg's REST catalog fixture in a JVM: its JDBC catalog in ``root/catalog.db``, the
    tables' files under ``root/warehouse`` (``<warehouse>/<namespace>/<table>``), its log in
    ``root/server.log``. The port is picked at the first start; a restart keeps it, and the
    tables (the SQLite file)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.warehouse = self.root / "warehouse"
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> RestCatalogServer:
        """Start the server and wait until ``GET /v1/config`` answers."""
        cp = classpath()
        if not self.port:
            self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env.update(
            CATALOG_URI=f"jdbc:sqlite:{self.root / 'catalog.db'}",
            CATALOG_WAREHOUSE=str(self.warehouse),  # a path: LocalFileIO takes no file: URL
            CATALOG_IO__IMPL=LOCAL_FILE_IO,
            CATALOG_REST_PORT=str(self.port),  # -> rest.port (REST_PORT alone is not read)
            CATALOG_JDBC_STRICT__MODE="true",
        )
        log = open(self.root / "server.log", "ab")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", cp, MAIN],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the REST catalog exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.uri}/v1/config", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the REST catalog did not answer in {timeout}s: {self.log_tail()}")

    def stop(self) -> None:
        """SIGKILL: the catalog is gone at once, as when its machine dies (every commit it
        acknowledged is in the SQLite file)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def __enter__(self) -> RestCatalogServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
