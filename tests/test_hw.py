import dataclasses
import json

import pytest

from snowir.hw import ConfigError, SnowflakeConfig


def test_defaults_are_the_zc706_build() -> None:
    hw = SnowflakeConfig()
    assert hw.macs == 256
    assert hw.vmacs == 16
    assert hw.icache_instructions * 4 == 4096  # 4 KB of 32-bit instructions
    assert hw.dram_bytes_per_cycle == pytest.approx(16.8)
    assert hw.cycles_to_ms(250_000) == pytest.approx(1.0)


def test_json_round_trip(tmp_path) -> None:
    hw = SnowflakeConfig(cus=2, dram_gbps=8.0, ld_startup_cycles=10)
    hw.validate()
    path = tmp_path / "hw.json"
    hw.save(path)
    assert SnowflakeConfig.load(path) == hw


@pytest.mark.parametrize(
    "data, message",
    [
        ({"nope": 1}, "unknown hardware parameter 'nope'"),
        ({"cus": "4"}, "parameter 'cus' must be int"),
        ({"cus": 0}, r"parameter 'cus' = 0 must be in \[1, 16\]"),
        ({"registers": 64}, r"parameter 'registers' = 64 must be = 32"),
        ({"dram_gbps": -1.0}, r"parameter 'dram_gbps' = -1.0 must be in"),
        ({"result_latency": -3}, r"parameter 'result_latency' = -3 must be in \[0, 1000\]"),
        ({"vmov_cycles": 0}, r"parameter 'vmov_cycles' = 0"),
        ({"branch_delay_slots": -1}, r"parameter 'branch_delay_slots' = -1 must be = 4"),
        ({"ld_startup_cycles": -5}, r"parameter 'ld_startup_cycles' = -5"),
        ({"unit_gbps": 5.0}, r"'unit_gbps' = 5.0 exceeds 'dram_gbps'"),
    ],
)
def test_bad_config_is_one_line_error(tmp_path, data, message) -> None:
    path = tmp_path / "hw.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message) as info:
        SnowflakeConfig.load(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unreadable_config(tmp_path) -> None:
    path = tmp_path / "hw.json"
    path.write_text("{oops")
    with pytest.raises(ConfigError, match="invalid JSON"):
        SnowflakeConfig.load(path)


def test_every_field_has_a_range() -> None:
    from snowir.hw import RANGES

    assert set(RANGES) == {f.name for f in dataclasses.fields(SnowflakeConfig)}
    SnowflakeConfig().validate()  # the defaults are in range


def test_hw_takes_the_json_itself_or_a_file(tmp_path) -> None:
    """`--hw '{"cus": 16}'` as well as a file: a string starting with '{' is the description; a bad
    one is one ConfigError line."""
    import pytest as _pytest

    from snowir.hw import ConfigError, SnowflakeConfig

    assert SnowflakeConfig.load('{"cus": 16, "dram_gbps": 8.4}') == SnowflakeConfig(cus=16, dram_gbps=8.4)
    path = tmp_path / "hw.json"
    path.write_text('{"cus": 16}')
    assert SnowflakeConfig.load(str(path)) == SnowflakeConfig(cus=16)
    for bad, says in (('{"cus": 16', "invalid JSON"), ('{"cux": 16}', "did you mean 'cus'"), ('{"cus": 0}', "'cus'")):
        with _pytest.raises(ConfigError, match=says) as e:
            SnowflakeConfig.load(bad)
        assert "\n" not in str(e.value)
