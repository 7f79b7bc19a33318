"""Compare our coreweave.sandbox.v1 descriptors with those the published cwsandbox client ships.

Usage: compare_descriptors.py OUR_DESCRIPTOR_SET

Every element of every public file is compared both ways (missing in ours, added by ours, or
different), then the whole serialized file, so declaration order and option encoding count too.
Prints one line per difference ("sandbox.proto: SandboxSpec.runner_ids: number 9 vs 10", ours
first) and exits 1 when there is any; prints a summary and exits 0 otherwise.
"""

import importlib
import sys

from google.api import annotations_pb2, field_behavior_pb2  # noqa: F401  (registers the options)
from google.protobuf import descriptor_pb2, text_format

PUBLIC_MODULES = [
    "sandbox",
    "discovery",
    "sandbox_data_plane",
    "runtime_class",
    "volume",
    "settings",
    "sandbox_template",
]


def published_files():
    files = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(f"cwsandbox._proto.{module_name}_pb2")
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        files[proto.name] = proto
    return files


def our_files(path):
    with open(path, "rb") as handle:
        descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(handle.read())
    return {proto.name: proto for proto in descriptor_set.file}


def options_text(options):
    """A canonical rendering of an options message, extensions included."""
    return text_format.MessageToString(options, as_one_line=True, print_unknown_fields=True)


class Comparison:
    def __init__(self):
        self.differences = []
        self.elements = 0

    def differ(self, file_name, path, what, ours, theirs):
        self.differences.append(f"{file_name}: {path}: {what} {ours!r} vs {theirs!r}")

    def check(self, file_name, path, what, ours, theirs):
        self.elements += 1
        if ours != theirs:
            self.differ(file_name, path, what, ours, theirs)

    def by_name(self, file_name, scope, kind, ours, theirs, compare):
        ours_by_name = {item.name: item for item in ours}
        theirs_by_name = {item.name: item for item in theirs}
        for name, item in theirs_by_name.items():
            path = f"{scope}.{name}" if scope else name
            if name not in ours_by_name:
                self.differences.append(f"{file_name}: {path}: {kind} missing in ours")
            else:
                compare(file_name, path, ours_by_name[name], item)
        for name in ours_by_name.keys() - theirs_by_name.keys():
            path = f"{scope}.{name}" if scope else name
            self.differences.append(f"{file_name}: {path}: {kind} added by ours (not in the published API)")

    def file(self, file_name, ours, theirs):
        self.check(file_name, "(file)", "package", ours.package, theirs.package)
        self.check(file_name, "(file)", "syntax", ours.syntax, theirs.syntax)
        self.check(file_name, "(file)", "dependencies", list(ours.dependency), list(theirs.dependency))
        self.check(file_name, "(file)", "public dependencies", list(ours.public_dependency), list(theirs.public_dependency))
        self.check(file_name, "(file)", "options", options_text(ours.options), options_text(theirs.options))
        self.by_name(file_name, "", "message", ours.message_type, theirs.message_type, self.message)
        self.by_name(file_name, "", "enum", ours.enum_type, theirs.enum_type, self.enum)
        self.by_name(file_name, "", "service", ours.service, theirs.service, self.service)
        self.check(file_name, "(file)", "extensions", len(ours.extension), len(theirs.extension))

    def message(self, file_name, path, ours, theirs):
        self.check(file_name, path, "options", options_text(ours.options), options_text(theirs.options))
        self.check(file_name, path, "oneofs", [o.name for o in ours.oneof_decl], [o.name for o in theirs.oneof_decl])
        self.check(
            file_name, path, "reserved ranges",
            [(r.start, r.end) for r in ours.reserved_range], [(r.start, r.end) for r in theirs.reserved_range],
        )
        self.check(file_name, path, "reserved names", list(ours.reserved_name), list(theirs.reserved_name))

        def field(file_name, field_path, our_field, their_field):
            self.check(file_name, field_path, "number", our_field.number, their_field.number)
            self.check(file_name, field_path, "type", our_field.type, their_field.type)
            self.check(file_name, field_path, "type name", our_field.type_name, their_field.type_name)
            self.check(file_name, field_path, "label", our_field.label, their_field.label)
            self.check(file_name, field_path, "proto3 optional", our_field.proto3_optional, their_field.proto3_optional)
            self.check(file_name, field_path, "json name", our_field.json_name, their_field.json_name)
            self.check(file_name, field_path, "default", our_field.default_value, their_field.default_value)
            self.check(
                file_name, field_path, "oneof",
                ours.oneof_decl[our_field.oneof_index].name if our_field.HasField("oneof_index") else None,
                theirs.oneof_decl[their_field.oneof_index].name if their_field.HasField("oneof_index") else None,
            )
            self.check(
                file_name, field_path, "field_behavior",
                [field_behavior_pb2.FieldBehavior.Name(b) for b in our_field.options.Extensions[field_behavior_pb2.field_behavior]],
                [field_behavior_pb2.FieldBehavior.Name(b) for b in their_field.options.Extensions[field_behavior_pb2.field_behavior]],
            )
            self.check(file_name, field_path, "options", options_text(our_field.options), options_text(their_field.options))

        self.by_name(file_name, path, "field", ours.field, theirs.field, field)
        self.by_name(file_name, path, "message", ours.nested_type, theirs.nested_type, self.message)
        self.by_name(file_name, path, "enum", ours.enum_type, theirs.enum_type, self.enum)

    def enum(self, file_name, path, ours, theirs):
        self.check(file_name, path, "options", options_text(ours.options), options_text(theirs.options))

        def value(file_name, value_path, our_value, their_value):
            self.check(file_name, value_path, "number", our_value.number, their_value.number)
            self.check(file_name, value_path, "options", options_text(our_value.options), options_text(their_value.options))

        self.by_name(file_name, path, "enum value", ours.value, theirs.value, value)

    def service(self, file_name, path, ours, theirs):
        self.check(file_name, path, "options", options_text(ours.options), options_text(theirs.options))

        def method(file_name, method_path, our_method, their_method):
            self.check(file_name, method_path, "input", our_method.input_type, their_method.input_type)
            self.check(file_name, method_path, "output", our_method.output_type, their_method.output_type)
            self.check(file_name, method_path, "client streaming", our_method.client_streaming, their_method.client_streaming)
            self.check(file_name, method_path, "server streaming", our_method.server_streaming, their_method.server_streaming)
            self.check(
                file_name, method_path, "google.api.http",
                options_text(our_method.options.Extensions[annotations_pb2.http]),
                options_text(their_method.options.Extensions[annotations_pb2.http]),
            )
            self.check(file_name, method_path, "options", options_text(our_method.options), options_text(their_method.options))

        self.by_name(file_name, path, "method", ours.method, theirs.method, method)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ours = our_files(sys.argv[1])
    theirs = published_files()
    comparison = Comparison()
    for file_name, their_file in sorted(theirs.items()):
        short = file_name.rsplit("/", 1)[-1]
        if file_name not in ours:
            comparison.differences.append(f"{short}: (file) missing in ours")
            continue
        comparison.file(short, ours[file_name], their_file)
        if not comparison.differences:
            # Element equality does not cover order or option encoding; the bytes do.
            our_file = descriptor_pb2.FileDescriptorProto()
            our_file.CopyFrom(ours[file_name])
            our_file.ClearField("source_code_info")
            if our_file.SerializeToString(deterministic=True) != their_file.SerializeToString(deterministic=True):
                comparison.differences.append(f"{short}: (file) serialized descriptor differs although every element matches (declaration order?)")
    for line in comparison.differences:
        print(line)
    if comparison.differences:
        print(f"{len(comparison.differences)} differences in {len(theirs)} public files")
        return 1
    print(f"all {comparison.elements} compared elements of {len(theirs)} public files match")
    return 0


if __name__ == "__main__":
    sys.exit(main())
