"""The collection apcir keeps in Milvus: what the server must support, where the manifest lives, and the build's
state on both sides.

**What each backend needs** (checked before anything is encoded or inserted: :func:`prepare`):

============== ======================= ==========================================================================
backend        Milvus server           why
============== ======================= ==========================================================================
``milvus``     2.4 or later            ``SPARSE_FLOAT_VECTOR`` with a ``SPARSE_INVERTED_INDEX`` (inner product)
``milvus-dense`` 2.3 or later          *upsert* (the resumable build), a ``FLAT`` index with inner product
both           every supported server  collection properties that can be set (``alter_collection_properties``)
============== ======================= ==========================================================================

Milvus Lite (``milvus:PATH.db``, milvus-lite 2.4.10 or later) has all of them. The check asks the server its
version and refuses a version below the backend's minimum; then it creates the (empty) collection with the
backend's schema, index and metric, sets a property and reads everything back, so a server that says the right
version but lacks something is refused too, and the empty collection it created is dropped. Either refusal is one
line naming the server's version and what the backend needs.

**The manifest** is kept in the collection's properties, which every supported server can set (Milvus 2.3 cannot
*delete* a property, so apcir never does): ``apcir.build`` is ``building`` from the collection's creation until the
build ends, when one call sets ``apcir.manifest`` (the index manifest as JSON) and ``apcir.build = complete``
together. The local ``manifest.json`` is written beside the staged build and put in place only after the server
took it, so a build ends complete on both sides or unfinished on both; a collection whose ``apcir.build`` is not
``complete`` is never searched. (Collections built by earlier apcir versions, with ``apcir.manifest`` and no
``apcir.build``, are complete; ``apcir.build = 1`` is their unfinished state.)

**The companion folder** of a server's collection is named by the collection and its id in the server
(:meth:`~apcir.retrieval.location.MilvusLocation.companion_folder`), not by the address it was reached through:
the same collection through another port, host name or machine finds (or restores from the server) the same
folder.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from apcir.errors import ApcirError
from apcir.io import write_json
from apcir.retrieval.location import MilvusLocation, parse_milvus
from apcir.retrieval.manifest import MANIFEST, IndexManifest, read_manifest
from apcir.retrieval.milvus.client import call, connect, naming_the_log, server_version, version_number

ID_FIELD = "id"
VECTOR_FIELD = "vector"
MAX_ID_LENGTH = 512
MANIFEST_PROPERTY = "apcir.manifest"
BUILD_PROPERTY = "apcir.build"
BUILDING = "building"
COMPLETE = "complete"

State = Literal["absent", "foreign", "building", "complete"]


@dataclass(frozen=True)
class Requirement:
    """What a backend needs of a Milvus server."""

    backend: str
    sparse: bool
    minimum: tuple[int, int]
    needs: str
    index_type: str
    otherwise: str = ""

    @property
    def minimum_text(self) -> str:
        return f"Milvus {self.minimum[0]}.{self.minimum[1]} or later"


REQUIREMENTS = {
    True: Requirement("milvus", True, (2, 4), "sparse vectors: SPARSE_FLOAT_VECTOR with a SPARSE_INVERTED_INDEX, "
                      "inner product; collection properties", "SPARSE_INVERTED_INDEX",
                      "; on this server use --backend milvus-dense, or a newer server"),
    False: Requirement("milvus-dense", False, (2, 3), "upsert; a FLAT index, inner product; collection "
                       "properties", "FLAT"),
}
METRIC = "IP"


def requirement(backend: str) -> Requirement:
    from apcir.retrieval.registry import BACKENDS, ENCODER_KINDS

    kind = BACKENDS.get(backend).encoder
    return REQUIREMENTS[kind is not None and ENCODER_KINDS.get(kind).sparse]


# ---- the collection's state ----------------------------------------------------------------------
def describe(client: Any, location: MilvusLocation) -> dict[str, Any] | None:
    """The collection's description (fields, properties, id), or None when it does not exist."""
    if not call(location, "listing collections", client.has_collection, location.collection):
        return None
    return dict(call(location, "describing the collection", client.describe_collection, location.collection))


def properties(described: dict[str, Any] | None) -> dict[str, str]:
    return dict((described or {}).get("properties") or {})


def state(described: dict[str, Any] | None) -> State:
    """``absent``, ``foreign`` (not built by apcir), ``building`` (unfinished) or ``complete``."""
    if described is None:
        return "absent"
    props = properties(described)
    build = props.get(BUILD_PROPERTY)
    if MANIFEST_PROPERTY in props and build in (None, COMPLETE):
        return "complete"
    return "building" if build is not None else "foreign"


def companion(location: MilvusLocation, described: dict[str, Any]) -> Path:
    """The collection's local companion folder, named by its identity in the server."""
    if location.lite:
        return location.root
    identity = described.get("collection_id")
    if not identity:
        raise ApcirError(f"Milvus at {location} gave no id for collection {location.collection}; apcir names its "
                         "local folder by it")
    return location.companion_folder(identity)


def stored_manifest(location: MilvusLocation, described: dict[str, Any] | None) -> IndexManifest:
    """The manifest of a complete build; anything else is one line saying what the collection is."""
    where = state(described)
    if where == "absent":
        raise ApcirError(f"no index at {location}: the collection does not exist; build it with "
                         f"`apcir index build --out {location} ...`")
    if where == "foreign":
        raise ApcirError(f"Milvus collection {location} is not built by apcir; name another collection (apcir never "
                         "writes into a collection it did not create)")
    if where == "building":
        raise ApcirError(f"Milvus collection {location} holds an unfinished apcir build, which is never searched; "
                         f"finish it by running its `apcir index build --out {location} ...` again")
    try:
        return IndexManifest.model_validate_json(properties(described)[MANIFEST_PROPERTY])
    except ValueError:  # pydantic's ValidationError, a property written by something else
        raise ApcirError(f"Milvus collection {location} holds an unreadable apcir manifest; rebuild it with "
                         "--overwrite") from None


def _restore(folder: Path, manifest: IndexManifest) -> None:
    """Make the companion folder's manifest the collection's (the server's is the one that counts)."""
    local = folder / MANIFEST
    if local.exists():
        try:
            if read_manifest(folder) == manifest:
                return
        except ApcirError:
            pass
    folder.mkdir(parents=True, exist_ok=True)
    write_json(local, manifest.model_dump(), indent=2)


# ---- reading -------------------------------------------------------------------------------------
def locate(target: str | MilvusLocation) -> Path:
    """The companion folder of a complete index at ``target``, its manifest restored from the collection when
    this machine has none (another machine, another address); an unfinished build, a missing or foreign
    collection is one line."""
    location = parse_milvus(target) if isinstance(target, str) else target
    with naming_the_log():
        client = connect(location)
        try:
            described = describe(client, location)
        finally:
            client.close()
    manifest = stored_manifest(location, described)
    folder = companion(location, described)  # type: ignore[arg-type]  # stored_manifest: it exists
    _restore(folder, manifest)
    return folder


# ---- building ------------------------------------------------------------------------------------
def prepare(target: str, backend: str, *, dimension: Callable[[], int] | None = None,
            overwrite: bool = False) -> Path:
    """Check the server and the collection before a build does any work, and return the companion folder.

    The server's version must reach the backend's minimum; a missing collection is created (empty, marked
    ``building``) with the backend's schema, index and metric, and checked by reading it back (with
    ``overwrite``, an apcir collection is dropped first); an unfinished build is checked to hold the backend's
    kind of vectors; a complete index is left as it is (its manifest restored locally). ``dimension`` gives the
    dense vectors' size (called only when a collection is created)."""
    location = parse_milvus(target)
    need = requirement(backend)
    with naming_the_log():
        return _prepare(location, need, dimension, overwrite)


def _prepare(location: MilvusLocation, need: Requirement, dimension: Callable[[], int] | None,
             overwrite: bool) -> Path:
    backend = need.backend
    client = connect(location)
    try:
        version = server_version(client, location)
        number = version_number(version)
        if number is not None and number[:2] < need.minimum:
            raise ApcirError(f"Milvus at {location} is {version}; the {backend} backend needs {need.minimum_text} "
                             f"({need.needs}){need.otherwise}")
        described = describe(client, location)
        where = state(described)
        if where == "foreign":
            raise ApcirError(f"Milvus collection {location} exists and was not built by apcir; name another "
                             "collection")
        if overwrite and described is not None:
            folder = companion(location, described)
            call(location, "dropping the previous index", client.drop_collection, location.collection)
            if not location.lite:
                shutil.rmtree(folder, ignore_errors=True)
            described, where = None, "absent"
        if where == "absent":
            described = _create(client, location, version, need, None if need.sparse else _size(dimension))
        elif where == "building":  # an unfinished build, resumed: the same kind (and size) of vectors
            _check(client, location, version, need, described, None if need.sparse else _size(dimension))
        folder = companion(location, described)  # type: ignore[arg-type]
        if where == "complete":
            _restore(folder, stored_manifest(location, described))
        return folder
    finally:
        client.close()


def _size(dimension: Callable[[], int] | None) -> int:
    if dimension is None:
        raise ApcirError("a milvus-dense collection needs the encoder's dimension")
    return int(dimension())


def _refuse(location: MilvusLocation, version: str, need: Requirement, what: str) -> ApcirError:
    return ApcirError(f"Milvus at {location} ({version}) {what}; the {need.backend} backend needs "
                      f"{need.minimum_text} ({need.needs}){need.otherwise}")


def _create(client: Any, location: MilvusLocation, version: str, need: Requirement,
            dimension: int | None) -> dict[str, Any]:
    """Create the empty collection and read it back; whatever the server lacks drops it again and refuses."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
    if need.sparse:
        schema.add_field(VECTOR_FIELD, DataType.SPARSE_FLOAT_VECTOR)
    else:
        schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dimension)
    index = client.prepare_index_params()
    index.add_index(field_name=VECTOR_FIELD, index_type=need.index_type, metric_type=METRIC)
    try:
        try:
            call(location, "creating the collection", client.create_collection, location.collection, schema=schema,
                 index_params=index, consistency_level="Strong", properties={BUILD_PROPERTY: BUILDING})
        except ApcirError as exc:
            described = describe(client, location)
            if state(described) == "building":  # another shard job created it at the same moment
                return _check(client, location, version, need, described, dimension)
            raise _refuse(location, version, need, f"could not create the collection: {exc.message}") from None
        return _check(client, location, version, need, describe(client, location), dimension)
    except ApcirError:
        leftover = describe(client, location)
        if leftover is not None and state(leftover) == "building" and not _rows(client, location):
            call(location, "dropping the collection it could not use", client.drop_collection, location.collection)
        raise


def _rows(client: Any, location: MilvusLocation) -> int:
    try:
        stats = client.get_collection_stats(location.collection)
        return int(stats.get("row_count", 0))
    except Exception:  # a collection whose statistics cannot be read is not dropped
        return 1


def _check(client: Any, location: MilvusLocation, version: str, need: Requirement,
           described: dict[str, Any] | None, dimension: int | None) -> dict[str, Any]:
    """The collection has the backend's vector field, index and metric, and its properties can be set."""
    if described is None:
        raise ApcirError(f"Milvus collection {location} disappeared while the build was starting; run it again")
    from pymilvus import DataType

    field = next((f for f in described.get("fields", []) if f.get("name") == VECTOR_FIELD), None)
    kind = DataType.SPARSE_FLOAT_VECTOR if need.sparse else DataType.FLOAT_VECTOR
    if field is None or field.get("type") != kind:
        have = getattr(field.get("type"), "name", field.get("type")) if field else "no vector field"
        raise ApcirError(f"Milvus collection {location} holds {have}, not the {kind.name} a {need.backend} index "
                         "needs; rebuild it with --overwrite")
    size = (field.get("params") or {}).get("dim")
    if dimension is not None and size is not None and int(size) != dimension:
        raise ApcirError(f"Milvus collection {location} holds {size}-dimensional vectors, the encoder gives "
                         f"{dimension}; rebuild it with --overwrite")
    try:
        index = call(location, "describing the index", client.describe_index, location.collection,
                     index_name=VECTOR_FIELD)
    except ApcirError as exc:
        raise _refuse(location, version, need, f"could not describe the index: {exc.message}") from None
    index = index or {}
    if not index.get("index_type"):
        raise _refuse(location, version, need, f"did not create the {need.index_type} index on the vectors")
    if index.get("index_type") != need.index_type or index.get("metric_type") != METRIC:
        raise _refuse(location, version, need, f"built a {index.get('index_type')} index with "
                      f"{index.get('metric_type')}, not {need.index_type} with {METRIC}")
    try:
        call(location, "setting a collection property", client.alter_collection_properties, location.collection,
             properties={BUILD_PROPERTY: BUILDING})
    except ApcirError as exc:
        raise _refuse(location, version, need, f"cannot set collection properties: {exc.message}") from None
    described = describe(client, location)
    if properties(described).get(BUILD_PROPERTY) != BUILDING:
        raise _refuse(location, version, need, "does not keep collection properties")
    return described  # type: ignore[return-value]


def building_identity(client: Any, location: MilvusLocation) -> str:
    """The identity of the collection a build is writing (its companion folder's name); one line unless the
    collection exists and holds an unfinished apcir build."""
    described = describe(client, location)
    if state(described) != "building":
        what = {"absent": "no longer exists", "foreign": "is not apcir's", "complete": "is already complete"}
        raise ApcirError(f"Milvus collection {location} {what[state(described)]}; run `apcir index build` again")
    return str(location) if location.lite else str(companion(location, described).name)  # type: ignore[arg-type]


def publish(target: str, manifest: IndexManifest) -> None:
    """Mark the build complete: one call sets ``apcir.manifest`` and ``apcir.build = complete``, then the
    collection is read back to confirm it."""
    location = parse_milvus(target)
    client = connect(location)
    try:
        call(location, "recording the manifest", client.alter_collection_properties, location.collection,
             properties={MANIFEST_PROPERTY: manifest.model_dump_json(), BUILD_PROPERTY: COMPLETE})
        described = describe(client, location)
        if state(described) != "complete" or stored_manifest(location, described) != manifest:
            raise ApcirError(f"Milvus at {location} did not keep the manifest apcir recorded; the build stays "
                             "unfinished")
    finally:
        client.close()


def drop(target: str) -> None:
    """Remove a collection apcir built; a collection apcir did not build is refused."""
    location = parse_milvus(target)
    client = connect(location)
    try:
        described = describe(client, location)
        if state(described) == "foreign":
            raise ApcirError(f"Milvus collection {location} was not built by apcir; it is not replaced")
        if described is not None:
            call(location, "dropping the collection", client.drop_collection, location.collection)
    finally:
        client.close()
