"""Floating-point formats as data: :class:`FloatFormat` and the format registry.

A format is described by its raw fields only (exponent and mantissa widths, bias and the
convention used for the special values); everything else is derived, with the names used by
:class:`numpy.finfo` and ``ml_dtypes.finfo``.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any, Literal, get_args

import ml_dtypes
import numpy as np

__all__ = [
    "FloatFormat",
    "SPECIALS",
    "get_format",
    "register_format",
    "registered_formats",
    "format_table",
]

#: Special-value conventions.  ``"ieee"``: the all-ones exponent holds +-Inf (mantissa 0) and
#: NaN (mantissa != 0).  ``"fn"`` (finite): no Inf; only the all-ones exponent *and* mantissa
#: is NaN, every other code is finite.  ``"fnuz"`` (finite, unsigned zero): no Inf and no -0;
#: the code that would be -0 (sign bit alone) is the single NaN.  ``"finite"``: no Inf and no
#: NaN at all, every code is a number (the OCP MX element types float6/float4; ml_dtypes calls
#: them ``fn`` too).  ``"unsigned"``: no sign bit, no zero and no subnormals; every code
#: ``c`` is ``2**(c - bias)`` except all ones, the NaN (the MX scale type float8_e8m0fnu;
#: mantissa_bits must be 0).  The IEEE P3109 conventions (formats ``binaryKpP``; zero and
#: subnormals everywhere, no -0, one NaN): ``"extended"``: signed, NaN at the code of -0 (the
#: sign bit alone), +-Inf at the largest magnitude code (all ones but the sign);
#: ``"signed_finite"``: the codes of ``"fnuz"`` (NaN at the -0 code, no Inf, no -0), but
#: saturating conversions send +-Inf to +-max (P3109's SatFinite, gfloat) where ``"fnuz"``
#: gives NaN (ONNX Cast-21's rule for its FNUZ types).  ``"unsigned_extended"`` and
#: ``"unsigned_finite"``: no sign bit, NaN at all ones, and for the extended ones +Inf just
#: below it.
Specials = Literal[
    "ieee",
    "fn",
    "fnuz",
    "finite",
    "unsigned",
    "extended",
    "signed_finite",
    "unsigned_extended",
    "unsigned_finite",
]
SPECIALS = get_args(Specials)

#: The specials conventions without a sign bit.
_UNSIGNED = ("unsigned", "unsigned_extended", "unsigned_finite")
#: Conventions whose largest magnitude code is +Inf (below the NaN for unsigned ones).
_EXTENDED = ("extended", "unsigned_extended")
#: Conventions whose single NaN is the code of -0 (the sign bit alone), with no -0.
_NAN_AT_NEG_ZERO = ("fnuz", "signed_finite", "extended")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloatFormat:
    """A binary floating-point format of at most 16 bits.

    Only the raw fields are stored; limits such as :attr:`max` or :attr:`eps` are derived
    properties named as in :class:`numpy.finfo`.  Instances are immutable and hashable, so a
    format is its own cache key.

    Parameters
    ----------
    name : str
        Canonical name, e.g. ``"float8_e4m3fn"`` (ml_dtypes' spelling for the built-ins).
    exponent_bits : int
        Width of the exponent field, 1 to 11.
    mantissa_bits : int
        Width of the stored mantissa (fraction) field, 0 to 14.
    bias : int
        Exponent bias: a normal code with exponent field ``e`` has the value
        ``2**(e - bias) * (1 + m / 2**mantissa_bits)``.
    specials : {"ieee", "fn", "fnuz", "finite", "unsigned", "extended", "signed_finite", \
"unsigned_extended", "unsigned_finite"}
        How Inf, NaN and -0 are encoded; see :data:`SPECIALS`.

    Raises
    ------
    ValueError
        If a field is out of range, the format has more than 16 bits, or its values are not
        all exactly representable in float64.

    Examples
    --------
    >>> from fp8kit import FloatFormat
    >>> e3m4 = FloatFormat(name="e3m4", exponent_bits=3, mantissa_bits=4, bias=3, specials="ieee")
    >>> e3m4.max, e3m4.smallest_subnormal, e3m4.bits
    (15.5, 0.015625, 8)
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: Specials = "ieee"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str, got {self.name!r}")
        for field in ("exponent_bits", "mantissa_bits", "bias"):
            value = getattr(self, field)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
                raise TypeError(f"{field} must be an int, got {value!r}")
            object.__setattr__(self, field, int(value))
        if not 1 <= self.exponent_bits <= 11:
            raise ValueError(
                f"exponent_bits must be in 1..11 (the range of float64), got {self.exponent_bits}"
            )
        if not 0 <= self.mantissa_bits <= 14:
            raise ValueError(f"mantissa_bits must be in 0..14, got {self.mantissa_bits}")
        if self.specials not in SPECIALS:
            raise ValueError(
                f"specials must be one of {', '.join(SPECIALS)}; got {self.specials!r}"
            )
        if self.bits > 16:
            raise ValueError(
                f"a format has at most 16 bits; 1 + exponent_bits + mantissa_bits = {self.bits}"
            )
        if self.specials == "ieee" and (self.exponent_bits < 2 or self.mantissa_bits < 1):
            raise ValueError(
                "an 'ieee' format needs exponent_bits >= 2 (finite normals) and "
                "mantissa_bits >= 1 (a NaN code)"
            )
        if self.specials == "fn" and self.exponent_bits + self.mantissa_bits < 2:
            raise ValueError("an 'fn' format needs at least 2 bits besides the sign")
        if self.specials in _EXTENDED and self.bits < 3:
            raise ValueError(
                f"an {self.specials!r} format needs at least 3 bits (zero, Inf and NaN codes)"
            )
        if self.specials == "unsigned" and self.mantissa_bits != 0:
            raise ValueError(
                "an 'unsigned' format (powers of two, like float8_e8m0fnu) needs "
                f"mantissa_bits=0, got {self.mantissa_bits}"
            )
        # Every finite value must be exact in float64, so that decoding to float64 and the
        # exact reference are lossless and encoding from float64 never needs normalisation.
        if self.max_exponent_field - self.bias > 1023 or self.minexp - self.mantissa_bits < -1074:
            raise ValueError(
                f"format {self.name!r} has values outside float64's range "
                f"(bias={self.bias}); choose a bias so that 2**{self.minexp - self.mantissa_bits}"
                f" and {self.max_exponent_field - self.bias} fit float64"
            )
        if self.minexp < -1022:
            raise ValueError(
                f"format {self.name!r}: smallest normal 2**{self.minexp} is below float64's "
                "smallest normal"
            )

        # Formats are dictionary keys on every call (kernel caches): hash once.
        object.__setattr__(self, "_hash", hash(self._key()))

    def _key(self) -> tuple:
        return (self.name, self.exponent_bits, self.mantissa_bits, self.bias, self.specials)

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    # ---------------------------------------------------------------- raw layout
    @property
    def bits(self) -> int:
        """Total width in bits (sign, exponent and mantissa)."""
        return int(self.signed) + self.exponent_bits + self.mantissa_bits

    @property
    def signed(self) -> bool:
        """Whether the format has a sign bit (all but ``unsigned`` formats)."""
        return self.specials not in _UNSIGNED

    @property
    def has_inf(self) -> bool:
        """Whether the format encodes +-Inf (+Inf only, for ``unsigned_extended``)."""
        return self.specials == "ieee" or self.specials in _EXTENDED

    @property
    def has_nan(self) -> bool:
        """Whether the format encodes NaN (all but ``finite`` formats)."""
        return self.specials != "finite"

    @property
    def has_zero(self) -> bool:
        """Whether the format encodes zero (all but ``unsigned`` formats)."""
        return self.specials != "unsigned"

    @property
    def has_negative_zero(self) -> bool:
        """Whether -0 is a distinct code (false for ``fnuz``, the P3109 and the unsigned
        formats)."""
        return self.specials not in (*_NAN_AT_NEG_ZERO, *_UNSIGNED)

    @property
    def max_exponent_field(self) -> int:
        """Largest exponent field that holds finite normal numbers."""
        top = (1 << self.exponent_bits) - 1
        return top - 1 if self.specials in ("ieee", "unsigned") else top

    @property
    def sign_mask(self) -> int:
        """The sign bit as an integer code (0 for ``unsigned`` formats, which have none)."""
        return 1 << (self.bits - 1) if self.signed else 0

    @property
    def magnitude_mask(self) -> int:
        """The bits of a code other than the sign."""
        return (1 << (self.bits - int(self.signed))) - 1

    @property
    def max_code(self) -> int:
        """Code of the largest finite value (positive sign)."""
        top = (self.max_exponent_field << self.mantissa_bits) | ((1 << self.mantissa_bits) - 1)
        # fn, extended, unsigned_finite: one special code above max (NaN or Inf);
        # unsigned_extended: two (+Inf, then NaN)
        below = {"fn": 1, "extended": 1, "unsigned_finite": 1, "unsigned_extended": 2}
        return top - below.get(self.specials, 0)

    @property
    def inf_code(self) -> int | None:
        """Code of +Inf, or None when the format has no Inf."""
        if not self.has_inf:
            return None
        if self.specials in _EXTENDED:
            return self.max_code + 1
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits

    @property
    def nan_code(self) -> int | None:
        """Code of the canonical (positive, quiet) NaN, or None when the format has no NaN.

        ``ieee``: exponent all ones, top mantissa bit set; ``fn``: all ones; ``fnuz``,
        ``signed_finite`` and ``extended``: the sign bit alone (this NaN has no sign); the
        unsigned conventions: all ones.
        """
        if self.specials == "finite":
            return None
        if self.specials in _UNSIGNED:
            return (1 << self.bits) - 1
        if self.specials in _NAN_AT_NEG_ZERO:
            return self.sign_mask
        if self.specials == "fn":
            return self.sign_mask - 1
        quiet = 1 << (self.mantissa_bits - 1) if self.mantissa_bits else 0
        if not quiet:
            raise ValueError(f"format {self.name!r} has no NaN code")  # pragma: no cover
        return self.inf_code | quiet  # type: ignore[operator]

    # ---------------------------------------------------------------- finfo-style limits
    @property
    def nmant(self) -> int:
        """Number of mantissa bits (as numpy.finfo)."""
        return self.mantissa_bits

    @property
    def nexp(self) -> int:
        """Number of exponent bits (as numpy.finfo)."""
        return self.exponent_bits

    iexp = nexp

    @property
    def minexp(self) -> int:
        """Exponent of the smallest normal number: ``smallest_normal == 2**minexp``."""
        return -self.bias if self.specials == "unsigned" else 1 - self.bias

    @property
    def maxexp(self) -> int:
        """Smallest power of two exponent that overflows, as in numpy.finfo:
        ``2**(maxexp - 1) <= max < 2**maxexp``.

        Taken from the exponent field of :attr:`max_code`, which is below
        :attr:`max_exponent_field`'s codes where the top exponent field holds only Inf or
        NaN: the precision-1 formats with Inf or NaN (P3109's ``p1`` formats but the signed
        finite ones; 2 below for the unsigned extended ones, whose top two codes are +Inf
        and NaN) and P3109's unsigned extended precision-2 formats.
        """
        field = (self.max_code & self.magnitude_mask) >> self.mantissa_bits
        if self.specials == "unsigned" or field > 0:
            return field - self.bias + 1
        # max is subnormal (a format of one exponent code): the exponent of its top bit
        return self.minexp - self.mantissa_bits + self.max_code.bit_length()

    @property
    def machep(self) -> int:
        """Exponent of :attr:`eps`."""
        return -self.mantissa_bits

    @property
    def negep(self) -> int:
        """Exponent of :attr:`epsneg`."""
        if self.minexp >= 0 and self.specials != "unsigned":
            # 1.0 is the smallest normal (or below it): below 1.0 lie the subnormals
            return self.minexp - self.mantissa_bits
        return -self.mantissa_bits - 1

    @property
    def max(self) -> float:
        """Largest finite value."""
        return float(self.code_value(self.max_code))

    @property
    def min(self) -> float:
        """Most negative finite value, ``-max`` (the smallest value for ``unsigned``
        formats, as ml_dtypes says; 0.0 for the unsigned P3109 formats)."""
        if self.specials == "unsigned":
            return self.smallest_normal
        return -self.max if self.signed else 0.0

    @property
    def smallest_normal(self) -> float:
        """Smallest positive normal value, ``2**minexp``."""
        return math.ldexp(1.0, self.minexp)

    tiny = smallest_normal

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value, ``2**(minexp - nmant)`` (``unsigned`` formats have no
        subnormals: their smallest normal)."""
        return math.ldexp(1.0, self.minexp - self.mantissa_bits)

    @property
    def eps(self) -> float:
        """Distance from 1.0 to the next larger value, ``2**-nmant``."""
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def epsneg(self) -> float:
        """Distance from 1.0 to the next smaller value, ``2**negep``."""
        return math.ldexp(1.0, self.negep)

    @property
    def precision(self) -> int:
        """Approximate number of exact decimal digits, ``floor(-log10(eps))``."""
        return int(math.floor(-math.log10(self.eps)))

    @property
    def resolution(self) -> float:
        """``10**-precision``, as numpy.finfo."""
        return 10.0**-self.precision

    @property
    def code_dtype(self) -> np.dtype:
        """Unsigned integer dtype that holds one code: uint8 up to 8 bits, else uint16."""
        return np.dtype(np.uint8) if self.bits <= 8 else np.dtype(np.uint16)

    @property
    def dtype(self) -> np.dtype | None:
        """The matching numpy/ml_dtypes dtype, or None for formats without one."""
        return _NUMPY_DTYPES.get(self)

    # ---------------------------------------------------------------- exact values
    def code_value(self, code: int) -> Fraction | float:
        """Exact value of one code: a Fraction, or a float for Inf and NaN.

        Parameters
        ----------
        code : int
            A code of the format, 0 to ``2**bits - 1``.

        Returns
        -------
        fractions.Fraction or float
            The exact value; ``math.inf``/``math.nan`` (with the code's sign) for specials.

        Raises
        ------
        ValueError
            If ``code`` is outside ``0..2**bits - 1``.

        Examples
        --------
        >>> from fp8kit import get_format
        >>> get_format("float8_e4m3fn").code_value(0x7E)
        Fraction(448, 1)
        """
        code = int(code)
        if not 0 <= code < (1 << self.bits):
            raise ValueError(f"code {code} is outside 0..{(1 << self.bits) - 1}")
        if self.specials == "unsigned":
            if code == self.nan_code:
                return math.nan
            return Fraction(2) ** (code - self.bias)
        sign = -1 if code & self.sign_mask else 1
        mag = code & (self.sign_mask - 1)
        if self.specials in _NAN_AT_NEG_ZERO and code == self.sign_mask:
            return math.nan
        if self.specials == "fn" and mag == self.sign_mask - 1:
            return math.copysign(math.nan, sign)
        if self.specials in _UNSIGNED and code == self.nan_code:
            return math.nan
        if self.specials in _EXTENDED and mag == self.inf_code:
            return math.copysign(math.inf, sign)
        e = mag >> self.mantissa_bits
        m = mag & ((1 << self.mantissa_bits) - 1)
        if self.specials == "ieee" and e == (1 << self.exponent_bits) - 1:
            return math.copysign(math.inf if m == 0 else math.nan, sign)
        if e == 0:
            value = Fraction(m, 1 << self.mantissa_bits) * Fraction(2) ** self.minexp
        else:
            value = Fraction((1 << self.mantissa_bits) + m, 1 << self.mantissa_bits) * Fraction(
                2
            ) ** (e - self.bias)
        return sign * value

    def __str__(self) -> str:
        return self.name


def _builtin(name: str, e: int, m: int, bias: int, specials: Specials) -> FloatFormat:
    return FloatFormat(name=name, exponent_bits=e, mantissa_bits=m, bias=bias, specials=specials)


float8_e4m3fn = _builtin("float8_e4m3fn", 4, 3, 7, "fn")
float8_e4m3fnuz = _builtin("float8_e4m3fnuz", 4, 3, 8, "fnuz")
float8_e5m2 = _builtin("float8_e5m2", 5, 2, 15, "ieee")
float8_e5m2fnuz = _builtin("float8_e5m2fnuz", 5, 2, 16, "fnuz")
bfloat16 = _builtin("bfloat16", 8, 7, 127, "ieee")
float16 = _builtin("float16", 5, 10, 15, "ieee")
float8_e4m3 = _builtin("float8_e4m3", 4, 3, 7, "ieee")
float8_e3m4 = _builtin("float8_e3m4", 3, 4, 3, "ieee")
float8_e4m3b11fnuz = _builtin("float8_e4m3b11fnuz", 4, 3, 11, "fnuz")
float8_e8m0fnu = _builtin("float8_e8m0fnu", 8, 0, 127, "unsigned")
float6_e2m3fn = _builtin("float6_e2m3fn", 2, 3, 1, "finite")
float6_e3m2fn = _builtin("float6_e3m2fn", 3, 2, 3, "finite")
float4_e2m1fn = _builtin("float4_e2m1fn", 2, 1, 1, "finite")

_NUMPY_DTYPES: dict[FloatFormat, np.dtype] = {
    float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    float8_e4m3fnuz: np.dtype(ml_dtypes.float8_e4m3fnuz),
    float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    float8_e5m2fnuz: np.dtype(ml_dtypes.float8_e5m2fnuz),
    bfloat16: np.dtype(ml_dtypes.bfloat16),
    float16: np.dtype(np.float16),
    float8_e4m3: np.dtype(ml_dtypes.float8_e4m3),
    float8_e3m4: np.dtype(ml_dtypes.float8_e3m4),
    float8_e4m3b11fnuz: np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    float8_e8m0fnu: np.dtype(ml_dtypes.float8_e8m0fnu),
    float6_e2m3fn: np.dtype(ml_dtypes.float6_e2m3fn),
    float6_e3m2fn: np.dtype(ml_dtypes.float6_e3m2fn),
    float4_e2m1fn: np.dtype(ml_dtypes.float4_e2m1fn),
}

# name (lower case) -> format.  Canonical names first, then ONNX and OpenVINO spellings.
_REGISTRY: dict[str, FloatFormat] = {}
_CANONICAL: dict[str, FloatFormat] = {}
_ALIASES: dict[FloatFormat, tuple[str, ...]] = {}


def register_format(fmt: FloatFormat, aliases: tuple[str, ...] | list[str] = ()) -> FloatFormat:
    """Add a format (and optional aliases) to the registry so it can be named by string.

    Parameters
    ----------
    fmt : FloatFormat
        The format; its ``name`` becomes a valid name for :func:`get_format`.
    aliases : sequence of str, optional
        Further names (matched case-insensitively).

    Returns
    -------
    FloatFormat
        ``fmt`` itself.

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat.
    ValueError
        If a name is already taken by a different format.

    Examples
    --------
    >>> from fp8kit import FloatFormat, register_format, get_format
    >>> e3m4 = FloatFormat(name="my_e3m4", exponent_bits=3, mantissa_bits=4, bias=3)
    >>> _ = register_format(e3m4, aliases=["e3m4_ieee"])
    >>> get_format("E3M4_IEEE") is e3m4
    True
    """
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"fmt must be a FloatFormat, got {type(fmt).__name__}")
    names = (fmt.name, *aliases)
    for n in names:
        if not isinstance(n, str):
            raise TypeError(f"aliases must be strings, got {n!r}")
        other = _REGISTRY.get(n.lower())
        if other is not None and other != fmt:
            raise ValueError(f"format name {n!r} is already registered for {other!r}")
    for n in names:
        _REGISTRY[n.lower()] = fmt
    _CANONICAL[fmt.name] = fmt
    _ALIASES[fmt] = tuple(dict.fromkeys((*_ALIASES.get(fmt, ()), *aliases)))
    return fmt


#: The formats that ship with fp8kit, in registry order.
BUILTIN_FORMATS = (float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, bfloat16, float16)

register_format(float8_e4m3fn, ["FLOAT8E4M3FN", "f8e4m3"])
register_format(float8_e4m3fnuz, ["FLOAT8E4M3FNUZ"])
register_format(float8_e5m2, ["FLOAT8E5M2", "f8e5m2"])
register_format(float8_e5m2fnuz, ["FLOAT8E5M2FNUZ"])
register_format(bfloat16, ["BFLOAT16", "bf16"])
register_format(float16, ["FLOAT16", "f16", "half"])

#: OCP MX element and scale formats and the other float8 variants of ml_dtypes (issue 8).
#: Not in BUILTIN_FORMATS, which keeps the formats of ONNX Cast-21 and FakeConvert-13.
MORE_FORMATS = (
    float8_e4m3,
    float8_e3m4,
    float8_e4m3b11fnuz,
    float8_e8m0fnu,
    float6_e2m3fn,
    float6_e3m2fn,
    float4_e2m1fn,
)
register_format(float8_e4m3, [])
register_format(float8_e3m4, [])
register_format(float8_e4m3b11fnuz, [])
register_format(float8_e8m0fnu, ["FLOAT8E8M0", "f8e8m0"])
register_format(float6_e2m3fn, ["FLOAT6E2M3"])
register_format(float6_e3m2fn, ["FLOAT6E3M2"])
register_format(float4_e2m1fn, ["FLOAT4E2M1", "f4e2m1"])


def _p3109_formats() -> tuple[FloatFormat, ...]:
    """Register IEEE P3109's binaryKpP formats, K = 3..8, as gfloat 0.5 defines them
    (``gfloat.formats.format_info_p3109``): precision P (the stored mantissa has P - 1 bits),
    signed (P in 1..K-1, bias ``2**(K-P-1)``) or unsigned (P in 1..K, bias ``2**(K-P)``),
    extended (+-Inf) or finite.  Canonical names are gfloat's (``p3109_k8p4se``), aliases the
    draft's spelling (``binary8p4se``); a format with the fields of an existing one gets both
    names as aliases instead.  The signed finite ones use ``specials="signed_finite"`` (the
    codes of ``fnuz``, P3109's SatFinite for +-Inf), so they are formats of their own; the two
    with an ml_dtypes twin (``p3109_k8p4sf``: float8_e4m3fnuz, ``p3109_k8p3sf``:
    float8_e5m2fnuz, the same codes) keep that dtype for array output."""
    by_fields = {
        (f.exponent_bits, f.mantissa_bits, f.bias, f.specials): f for f in _CANONICAL.values()
    }
    made = []
    for k in range(8, 2, -1):
        for signed in (True, False):
            for p in range(1, k if signed else k + 1):
                for extended in (True, False):
                    s, d = "s" if signed else "u", "e" if extended else "f"
                    specials = {
                        (True, True): "extended",
                        (True, False): "signed_finite",
                        (False, True): "unsigned_extended",
                        (False, False): "unsigned_finite",
                    }[signed, extended]
                    e = k - p if signed else k - p + 1
                    bias = 2 ** (k - p - 1) if signed else 2 ** (k - p)
                    name, alias = f"p3109_k{k}p{p}{s}{d}", f"binary{k}p{p}{s}{d}"
                    fmt = by_fields.get((e, p - 1, bias, specials))
                    if fmt is None:
                        fmt = _builtin(name, e, p - 1, bias, specials)  # type: ignore[arg-type]
                        register_format(fmt, [alias])
                    else:
                        register_format(fmt, [name, alias])
                    made.append(fmt)
    return tuple(made)


#: IEEE P3109 binaryKpP formats, K = 8 down to 3 (issue 20): 120 formats.
P3109_FORMATS = _p3109_formats()
# The signed finite binary8 formats have the codes of the float8 fnuz types, so they share
# their ml_dtypes dtype (after them: get_format(dtype) still gives the fnuz format).
_NUMPY_DTYPES[_REGISTRY["p3109_k8p4sf"]] = np.dtype(ml_dtypes.float8_e4m3fnuz)
_NUMPY_DTYPES[_REGISTRY["p3109_k8p3sf"]] = np.dtype(ml_dtypes.float8_e5m2fnuz)
_P3109_ONLY = frozenset(P3109_FORMATS) - frozenset(BUILTIN_FORMATS) - frozenset(MORE_FORMATS)


def p3109_name(fmt: FloatFormat) -> str | None:
    """gfloat's P3109 name of a format (``"p3109_k8p4se"`` for binary8p4se), or None."""
    if fmt.name.startswith("p3109_"):
        return fmt.name
    return next((a for a in aliases_of(fmt) if a.startswith("p3109_")), None)


def registered_formats() -> dict[str, FloatFormat]:
    """The registered formats by canonical name, in registration order.

    Returns
    -------
    dict of str to FloatFormat
        A new dict (changing it does not change the registry).

    Examples
    --------
    >>> from fp8kit import registered_formats
    >>> list(registered_formats())[:2]
    ['float8_e4m3fn', 'float8_e4m3fnuz']
    """
    return dict(_CANONICAL)


def aliases_of(fmt: FloatFormat) -> tuple[str, ...]:
    """The registered aliases of a format (not including its canonical name)."""
    return _ALIASES.get(fmt, ())


def _valid_names() -> str:
    # the 118 P3109 names by their pattern (a list of them all would bury the others)
    names = [n for n, f in _CANONICAL.items() if f not in _P3109_ONLY]
    return ", ".join(names) + ", or a P3109 name p3109_kKpP{s,u}{e,f} (K 3..8; binaryKpP...)"


def get_format(spec: Any, *, argname: str = "format") -> FloatFormat:
    """Return the canonical :class:`FloatFormat` for a name, alias, dtype or array.

    Parameters
    ----------
    spec : str, FloatFormat, numpy/ml_dtypes dtype or type, torch dtype, or array
        ``"float8_e4m3fn"``, an alias such as ``"FLOAT8E4M3FN"`` (ONNX) or ``"f8e4m3"``
        (OpenVINO), matched case-insensitively; a FloatFormat (returned as is); a dtype such
        as ``ml_dtypes.bfloat16``; or an object with a ``dtype`` attribute.
    argname : str, optional
        Name of the argument, used in error messages.

    Returns
    -------
    FloatFormat

    Raises
    ------
    ValueError
        If the name or dtype is not a registered format; the message lists the valid names.
    TypeError
        If ``spec`` is of a type that cannot name a format.

    Examples
    --------
    >>> import ml_dtypes
    >>> from fp8kit import get_format
    >>> get_format("f8e4m3").name
    'float8_e4m3fn'
    >>> get_format(ml_dtypes.float8_e5m2).max
    57344.0
    """
    if isinstance(spec, FloatFormat):
        return spec
    if isinstance(spec, str):
        fmt = _REGISTRY.get(spec.lower())
        if fmt is None:
            raise ValueError(f"unknown {argname} {spec!r}; valid: {_valid_names()}")
        return fmt
    if type(spec).__module__ == "torch" and type(spec).__name__ == "dtype":
        name = str(spec).removeprefix("torch.")
        fmt = _REGISTRY.get(name)
        if fmt is None:
            raise ValueError(f"unsupported {argname} {spec}; valid: {_valid_names()}")
        return fmt
    if isinstance(spec, (bool, int, float, complex)) or spec is None:
        raise TypeError(
            f"{argname} must be a format name, FloatFormat, dtype or array; got {spec!r}"
        )
    try:
        has_dtype = not isinstance(spec, type) and hasattr(spec, "dtype")
        dtype = np.dtype(spec.dtype if has_dtype else spec)
    except TypeError:
        raise TypeError(
            f"{argname} must be a format name, FloatFormat, dtype or array; got {spec!r}"
        ) from None
    for fmt, dt in _NUMPY_DTYPES.items():
        if dt == dtype:
            return fmt
    raise ValueError(f"unsupported {argname} dtype {dtype}; valid: {_valid_names()}")


def format_table(formats: Any = None) -> str:
    """A Markdown table of formats, generated from the registry.

    Parameters
    ----------
    formats : iterable of format specs, optional
        Default: the built-in formats (``fp8kit.formats.P3109_FORMATS``: the P3109 ones).

    Returns
    -------
    str
        One row per format: fields, special values, limits and aliases.

    Raises
    ------
    ValueError
        If a format name is unknown.

    Examples
    --------
    >>> from fp8kit import format_table
    >>> print(format_table().splitlines()[0])  # doctest: +ELLIPSIS
    | format | bits | ...
    """
    chosen = BUILTIN_FORMATS if formats is None else tuple(get_format(f) for f in formats)
    head = (
        "| format | bits | exp | mant | bias | Inf | NaN | -0 | max | smallest normal "
        "| smallest subnormal | eps | aliases |"
    )
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for fmt in chosen:
        nan = {
            "ieee": "IEEE",
            "fn": "all ones",
            "fnuz": "-0 code",
            "finite": "none",
            "unsigned": "all ones",
            "extended": "-0 code",
            "signed_finite": "-0 code",
            "unsigned_extended": "all ones",
            "unsigned_finite": "all ones",
        }[fmt.specials]
        rows.append(
            f"| `{fmt.name}` | {fmt.bits} | {fmt.exponent_bits} | {fmt.mantissa_bits} "
            f"| {fmt.bias} | {'yes' if fmt.has_inf else 'no'} | {nan} "
            f"| {'yes' if fmt.has_negative_zero else 'no'} | {fmt.max:g} "
            f"| {_pow2(fmt.minexp)} | {_pow2(fmt.minexp - fmt.mantissa_bits)} "
            f"| {_pow2(-fmt.mantissa_bits)} | {', '.join(f'`{a}`' for a in aliases_of(fmt))} |"
        )
    return "\n".join(rows)


def _pow2(e: int) -> str:
    return f"2^{e}"
