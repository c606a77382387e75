"""``vcproxy credentials add``: make a salted credential entry for the config's ``credentials.users``."""

from __future__ import annotations

import argparse
import getpass
import sys

import yaml

from proxy.auth import SCRAM_MECHANISMS
from proxy.auth.credentials import DEFAULT_ITERATIONS, MAX_ITERATIONS, MIN_ITERATIONS, CredentialError, make_entry


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        # One line; only the line break is dropped (spaces may be part of a password).
        return sys.stdin.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        raise CredentialError("no terminal to prompt on: pipe the password in with --password-stdin")
    first = getpass.getpass(f"Password for {args.user}: ")
    if getpass.getpass("Again: ") != first:
        raise CredentialError("the passwords differ")
    return first


def _add(args: argparse.Namespace) -> int:
    if not args.user:
        print("vcproxy: --user must not be empty", file=sys.stderr)
        return 2
    try:
        password = _read_password(args)
        if not password:
            raise CredentialError("the password is empty")
        entry = make_entry(password, args.iterations, args.mechanism or SCRAM_MECHANISMS)
    except (CredentialError, EOFError) as exc:
        print(f"vcproxy: {exc}", file=sys.stderr)
        return 2
    print(f"# {args.user}: salted SCRAM keys; PLAIN logins are checked against them too. No password is stored.")
    print(yaml.safe_dump({"credentials": {"users": {args.user: entry}}}, sort_keys=False), end="")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    credentials = subparsers.add_parser("credentials", help="manage SASL credentials for the proxy's listeners")
    actions = credentials.add_subparsers(dest="credentials_command", required=True)
    add = actions.add_parser(
        "add",
        help="print a credential entry (YAML) for credentials.users",
        description="Derive salted SCRAM keys from a password and print them as a YAML snippet to merge into "
        "the proxy's config. The password is read from stdin (--password-stdin) or prompted for.",
    )
    add.add_argument("--user", required=True, help="user name (the principal is User:<name>)")
    add.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 rounds, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})",
    )
    add.add_argument(
        "--mechanism",
        action="append",
        choices=SCRAM_MECHANISMS,
        help="only this SCRAM mechanism (repeatable; default both). PLAIN works with either.",
    )
    add.set_defaults(func=_add)
