"""The proxy's reading of SASL first messages (proxy/auth/sasl_messages.py): Kafka's rules, and a refusal
wherever the proxy and the broker could read two identities (issue 23). The same corpus goes to Kafka's
own classes in tests/integration/test_sasl_differential.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from proxy.auth.sasl_messages import Refused, claim_names, read_login, read_oauth_first, read_token_claims

from .sasl_corpus import CORPUS, EXP, bearer, jws, oauth
from .sasl_strategies import login_message, well_formed_login


@pytest.mark.parametrize(("mechanism", "message", "name"), CORPUS, ids=[f"{m}:{t!r}"[:80] for m, t, _ in CORPUS])
def test_the_corpus_reads_as_expected(mechanism, message, name):
    if name is None:
        with pytest.raises(Refused):
            read_login(mechanism, message)
    else:
        assert read_login(mechanism, message).name == name


def test_the_issues_message_is_refused_whichever_auth_comes_first():
    for first, second in (("nobody-relayed", "vcproxy"), ("vcproxy", "nobody-relayed")):
        with pytest.raises(Refused, match="given twice"):
            read_oauth_first(oauth(bearer(first), bearer(second)))


def test_every_claim_is_a_name_the_broker_could_log_in():
    login = read_login("OAUTHBEARER", oauth(bearer("alice", email="vcproxy", flag=True, n=3, roles=["admin"])))
    assert login.name == "alice"
    assert login.every_name == ("alice", "vcproxy", "true")  # numbers and arrays name nobody


def test_duplicate_members_are_refused_at_any_depth():
    with pytest.raises(Refused, match="given twice"):
        read_token_claims(jws(b'{"sub":"a","exp":1,"x":{"k":1,"k":2}}').decode())
    assert claim_names(read_token_claims(jws({"sub": "a", "exp": EXP}).decode())) == ("a",)


def test_a_deeply_nested_token_is_refused_not_a_crash():
    with pytest.raises(Refused):
        read_token_claims(jws(b"[" * 100_000 + b"]" * 100_000).decode())


@pytest.mark.parametrize("mechanism", ["GSSAPI", "SCRAM-SHA-1", ""])
def test_other_mechanisms_are_not_read(mechanism):
    with pytest.raises(Refused):
        read_login(mechanism, b"\0alice\0pw")


@settings(max_examples=400, deadline=None)
@given(login_message())
def test_any_message_is_read_or_refused(case):
    mechanism, message = case
    try:
        login = read_login(mechanism, message)
    except Refused:
        return
    # What was read names someone, in a form that round-trips through UTF-8 (Kafka's strings).
    assert login.name and login.name.encode("utf-8").decode("utf-8") == login.name
    if mechanism == "OAUTHBEARER":  # no key twice, in any case: Kafka would keep the last
        keys = [pair.partition(b"=")[0].lower() for pair in message.split(b"\x01")[1:-2]]
        assert len(keys) == len(set(keys)) and b"auth" in keys


@settings(max_examples=300, deadline=None)
@given(well_formed_login())
def test_a_well_formed_login_is_read_whatever_the_name(case):
    # The rules refuse only what could read two ways: ordinary logins, with any names Kafka takes, pass.
    mechanism, message = case
    assert read_login(mechanism, message).name
