"""The enum classes of ibcm.enums are written out for type checkers; each
must hold exactly the enumerators of its C enum (raw.ENUMS, itself checked
against the headers by test_abi.py), named by the prefix rule."""

import enum

import pytest

from ibcm import enums, raw

SPECS = [
    ("CmState", "ib_cm_state", "IB_CM_", enum.IntEnum),
    ("LapState", "ib_cm_lap_state", "IB_CM_", enum.IntEnum),
    ("EventType", "ib_cm_event_type", "IB_CM_", enum.IntEnum),
    ("RejReason", "ib_cm_rej_reason", "IB_CM_REJ_", enum.IntEnum),
    ("AprStatus", "ib_cm_apr_status", "IB_CM_APR_", enum.IntEnum),
    ("SidrStatus", "ib_cm_sidr_status", "IB_SIDR_", enum.IntEnum),
    ("PathRecType", "sa_path_rec_type", "SA_PATH_REC_TYPE_", enum.IntEnum),
    ("GidType", "ib_gid_type", "IB_GID_TYPE_", enum.IntEnum),
    ("IbEvent", "ib_event_type", "IB_EVENT_", enum.IntEnum),
    ("QpType", "ib_qp_type", "IB_QPT_", enum.IntEnum),
    ("WcStatus", "ib_wc_status", "IB_WC_", enum.IntEnum),
    ("Mtu", "ib_mtu", "IB_", enum.IntEnum),
    ("Rate", "ib_rate", "IB_", enum.IntEnum),
    ("QpState", "ib_qp_state", "IB_QPS_", enum.IntEnum),
    ("MigState", "ib_mig_state", "IB_MIG_", enum.IntEnum),
    ("QpAttrMask", "ib_qp_attr_mask", "IB_QP_", enum.IntFlag),
    ("AccessFlags", "ib_access_flags", "IB_ACCESS_", enum.IntFlag),
    ("AhAttrType", "rdma_ah_attr_type", "RDMA_AH_ATTR_TYPE_", enum.IntEnum),
]


def _short(cname, prefix):
    if cname.startswith(prefix):
        return cname[len(prefix):]
    return cname[3:] if cname.startswith("IB_") else cname


@pytest.mark.parametrize("name,tag,prefix,kind", SPECS, ids=[s[0] for s in SPECS])
def test_enum_matches_c(name, tag, prefix, kind):
    cls = getattr(enums, name)
    assert issubclass(cls, kind)
    want = {_short(c, prefix): v for c, v in raw.ENUMS[tag].items()}
    got = {n: int(m) for n, m in cls.__members__.items()}  # aliases included
    assert got == want
    for cname, value in raw.ENUMS[tag].items():
        assert enums.lookup(cls, cname) == value
        assert enums.lookup(cls, cname.lower()) == value


def test_every_c_enum_with_a_class_is_covered():
    covered = {tag for _n, tag, _p, _k in SPECS}
    classes = {n for n, obj in vars(enums).items() if isinstance(obj, type) and issubclass(obj, enum.Enum)}
    assert classes == {n for n, *_ in SPECS}
    assert covered <= set(raw.ENUMS)


def test_coerce_and_lookup():
    assert enums.coerce(enums.EventType, 3) is enums.EventType.REP_RECEIVED
    assert enums.coerce(enums.RejReason, 250) == 250 and type(enums.coerce(enums.RejReason, 250)) is int
    assert enums.lookup(enums.EventType, "rep_received") is enums.EventType.REP_RECEIVED
    with pytest.raises(ValueError):
        enums.lookup(enums.EventType, "NO_SUCH_EVENT")


def test_package_level_event_kinds():
    import ibcm

    for name, member in enums.EventType.__members__.items():
        assert getattr(ibcm, name) is member
        assert name in ibcm.__all__


def test_rej_reasons_are_the_librarys():
    """RejReason holds exactly the reasons the library has an
    ibcm_reject_msg text for: its table (wire::rej_reason, checked against
    the header by tests/abi.rs) and this enum cannot drift apart."""
    known = {int(m) for m in enums.RejReason}
    for v in range(256):
        has_text = raw.ibcm_reject_msg(v) != b"unrecognized reason"
        assert has_text == (v in known), f"reason {v}: text {has_text}, in RejReason {v in known}"
