"""The numbers the paper's §IV reports, quoted from its text, to print beside ours (not inputs to anything)."""

# Fig. 5 / §IV-C: BlueDove with 20 matchers saturates at 114,000 msg/s; P2P at ~30,000.
FIG_6A = {"bluedove_20": 114_000, "p2p_20": 30_000,
          "bluedove_over_p2p": {"5": 3.5, "20": 4.2}, "bluedove_over_full_replication": {"5": 14, "20": 67}}
# §IV-C: at 100,000 msg/s and 20 matchers BlueDove holds 4x the subscriptions of P2P, 30x of full replication.
FIG_6B = {"rate_msgs_per_s": 100_000, "bluedove_over_p2p": {"20": 4}, "bluedove_over_full_replication": {"20": 30}}
# §IV-D: 20 matchers; adaptive is 1.1x response-time, 1.2x subscription-count, 3.5x random;
# subscription-count is 3x random.
FIG_7 = {"matchers": 20, "adaptive_over_response_time": 1.1, "adaptive_over_subscription_count": 1.2,
         "adaptive_over_random": 3.5, "subscription_count_over_random": 3.0}
# §IV-D: normalised standard deviation of per-matcher CPU load.
FIG_8 = {"std_over_mean": {"bluedove": 0.14, "p2p": 0.82}}
# §IV-E: 5 matchers, +500 msg/s every 5 min, three matchers added; response time drops 5 s after an addition.
FIG_9 = {"start_matchers": 5, "added": 3, "response_drop_s": 5.0}
# §IV-E: 20 matchers, one taken offline every 5 min; loss rises to ~5 % and is back to 0 within 17.5 s on average.
FIG_10 = {"matchers": 20, "peak_loss": 0.05, "recovery_s": 17.5}
# §IV-F: 4 searchable dimensions give 5.5x the rate of 1; sigma 250 -> 1000 loses almost 40 %;
# 4 adversely skewed dimensions lose more than 50 % (~50K msg/s, still above P2P's ~30K).
FIG_11A = {"four_over_one": 5.5}
FIG_11B = {"sigma_1000_over_250": 0.6, "max_over_mean_subs_sigma_1000": 1.17}
FIG_11C = {"adverse_4_over_0": 0.5, "adverse_4_msgs_per_s": 50_000}
