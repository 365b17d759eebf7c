"""Kubernetes name and label rules, with the apiserver's exact messages.

Ported in behaviour (not in code) from k8s.io/apimachinery/pkg/util/validation: every function
returns the list of messages the apiserver would print, in the apiserver's order, so callers can
report the first one verbatim.
"""

from __future__ import annotations

import re

DNS1123_LABEL_MAX_LENGTH = 63
DNS1123_SUBDOMAIN_MAX_LENGTH = 253
QUALIFIED_NAME_MAX_LENGTH = 63
LABEL_VALUE_MAX_LENGTH = 63

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"

# The CRD patterns Kueue's kubebuilder markers put on name references.
DNS1123_SUBDOMAIN_PATTERN = "^" + DNS1123_SUBDOMAIN_FMT + "$"
DNS1123_LABEL_PATTERN = "^" + DNS1123_LABEL_FMT + "$"

_DNS1123_LABEL_RE = re.compile("^" + DNS1123_LABEL_FMT + "$")
_DNS1123_SUBDOMAIN_RE = re.compile("^" + DNS1123_SUBDOMAIN_FMT + "$")
_QUALIFIED_NAME_RE = re.compile("^" + QUALIFIED_NAME_FMT + "$")
_LABEL_VALUE_RE = re.compile("^" + LABEL_VALUE_FMT + "$")

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    # Reproduces apimachinery's RegexError byte for byte, including its odd "',  or '" spacing,
    # so that people can search our messages and find Kubernetes answers.
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    out = msg + " (e.g. "
    for i, example in enumerate(examples):
        if i > 0:
            out += " or "
        out += f"'{example}', "
    return out + f"regex used for validation is '{fmt}')"


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


EMPTY_ERROR = "must be non-empty"


def dns1123_label_errors(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_LABEL_MAX_LENGTH))
    if not _DNS1123_LABEL_RE.match(value):
        errs.append(regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX_LENGTH:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """Label keys, annotation keys, resource names: `[prefix/]name`."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + EMPTY_ERROR)
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part " + EMPTY_ERROR)
    elif len(name) > QUALIFIED_NAME_MAX_LENGTH:
        errs.append("name part " + max_len_error(QUALIFIED_NAME_MAX_LENGTH))
    if not _QUALIFIED_NAME_RE.match(name):
        errs.append(
            "name part "
            + regex_error(_QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value) > LABEL_VALUE_MAX_LENGTH:
        errs.append(max_len_error(LABEL_VALUE_MAX_LENGTH))
    if not _LABEL_VALUE_RE.match(value):
        errs.append(regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


# apimachinery's IsDomainPrefixedPath: an RFC 1123 subdomain, "/", then RFC 3986 path characters.
HTTP_PATH_FMT = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"
_HTTP_PATH_RE = re.compile("^" + HTTP_PATH_FMT + "$")
DOMAIN_PREFIXED_PATH_MSG = 'must be a domain-prefixed path (such as "acme.io/foo")'


def domain_prefixed_path_errors(value: str) -> list[tuple[str, str]]:
    """apimachinery's IsDomainPrefixedPath (`example.com/budget`, a Job's `spec.managedBy`): each
    error as (the part refused, the message), in the apiserver's order."""
    host, slash, path = value.partition("/")
    if not slash or not host or not path:
        return [(value, DOMAIN_PREFIXED_PATH_MSG)]
    errors = [(host, msg) for msg in dns1123_subdomain_errors(host)]
    if not _HTTP_PATH_RE.match(path):
        errors.append((path, regex_error("Invalid path", HTTP_PATH_FMT)))
    return errors


def generate_name_errors(prefix: str) -> list[str]:
    """A `metadata.generateName` checked as the apiserver checks it: the name rule (here an RFC 1123
    subdomain) on the prefix, a trailing '-' allowed (apimachinery's maskTrailingDash)."""
    masked = prefix[:-1] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
    return dns1123_subdomain_errors(masked)


# apiserver's names.SimpleNameGenerator: the prefix cut to 58 characters, then 5 random ones from
# apimachinery's rand alphabet (no vowels, no 0, 1 or 3), so a generated name has at most 63.
GENERATED_SUFFIX_LENGTH = 5
MAX_GENERATED_PREFIX_LENGTH = DNS1123_LABEL_MAX_LENGTH - GENERATED_SUFFIX_LENGTH
GENERATED_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def generated_name(prefix: str, choice) -> str:
    """The name the apiserver gives an object created with `generateName: prefix`; `choice` picks
    one character from a string (`random.Random(...).choice`), so callers decide where randomness
    comes from."""
    return prefix[:MAX_GENERATED_PREFIX_LENGTH] + "".join(
        choice(GENERATED_NAME_ALPHABET) for _ in range(GENERATED_SUFFIX_LENGTH)
    )
